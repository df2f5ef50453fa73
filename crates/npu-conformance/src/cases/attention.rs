//! Scaled dot-product attention: prefill with a padding mask (grouped K/V), causal, rows
//! that attend to nothing, decode over long contexts and over stale (NaN/Inf) masked cache slots,
//! head dims that are not a multiple of 32.

use crate::case::{Case, Rng};
use npu_ir::DType;
use npu_program::program::Kernel;

/// One attention case: q [b,h,s,d], k and v [b,kvh,t,d]. With `mask`, a causal-with-padding
/// mask over the cache (`finfo.min` where not attended), broadcast over heads; its last `dead`
/// rows attend to nothing (their output is zeros).
#[allow(clippy::too_many_arguments)]
fn case(
    rng: &mut Rng,
    [b, h, kvh, s, t, d]: [usize; 6],
    dt: DType,
    mask: bool,
    causal: bool,
    dead: usize,
    q_heads_interleaved: bool,
) -> Case {
    let name = format!(
        "attention {dt} b{b} h{h}/{kvh} s{s} t{t} d{d}{}{}{}{}",
        if mask { " mask" } else { "" },
        if causal { " causal" } else { "" },
        if dead > 0 { " dead rows" } else { "" },
        if q_heads_interleaved {
            " q[b,s,h,d]"
        } else {
            ""
        },
    );
    let kernel = Kernel::Attention {
        scale: 1.0 / (d as f32).sqrt(),
        causal,
    };
    let mut c = Case::new(name, kernel);
    c = if q_heads_interleaved {
        c.view(
            rng,
            &[b, s, h, d],
            dt,
            &[b, h, s, d],
            &[h * s * d, d, h * d, 1],
            0,
        )
    } else {
        c.input(rng, &[b, h, s, d], dt)
    };
    c = c
        .input(rng, &[b, kvh, t, d], dt)
        .input(rng, &[b, kvh, t, d], dt);
    if mask {
        let vals: Vec<f32> = (0..s * t)
            .map(|i| mask_value(i / t, i % t, s, t, dead))
            .collect();
        c = c.view_of(&[1, 1, s, t], dt, &vals, &[b, h, s, t], &[0, 0, t, 1], 0);
    }
    c.output(&[b, h, s, d], dt)
}

/// The padding-and-causal mask of `case` at (row, col): 0 where attended, `finfo.min` where
/// not (the first two slots, slots past `t / 3 + row`, and the last `dead` rows).
fn mask_value(row: usize, col: usize, s: usize, t: usize, dead: usize) -> f32 {
    if col <= t / 3 + row && col >= 2 && row + dead < s {
        0.0
    } else {
        -3.389_531_4e38
    }
}

/// Decode (one query row) over a static cache whose masked slots hold NaN and infinities, as
/// a cache slot not yet written may: a masked key's K and V must never reach the output.
fn stale_decode_case(rng: &mut Rng, [b, h, kvh, t, d]: [usize; 5], dt: DType) -> Case {
    stale_case(rng, [b, h, kvh, 1, t, d], dt)
}

/// `s` query rows sharing one mask row over a cache whose masked slots (the first two and all
/// past the first third) hold NaN in K and infinity in V, as a static KV cache's unwritten
/// slots may: they must not reach the output.
fn stale_case(rng: &mut Rng, [b, h, kvh, s, t, d]: [usize; 6], dt: DType) -> Case {
    let kernel = Kernel::Attention {
        scale: 1.0 / (d as f32).sqrt(),
        causal: false,
    };
    let poisoned = |rng: &mut Rng, poison: f32| -> Vec<f32> {
        (0..b * kvh * t * d)
            .map(|i| {
                let col = (i / d) % t;
                if mask_value(0, col, 1, t, 0) == 0.0 {
                    rng.f()
                } else {
                    poison
                }
            })
            .collect()
    };
    let (kv, vv) = (poisoned(rng, f32::NAN), poisoned(rng, f32::INFINITY));
    let mask: Vec<f32> = (0..t).map(|col| mask_value(0, col, 1, t, 0)).collect();
    Case::new(
        format!("attention {dt} b{b} h{h}/{kvh} s{s} t{t} d{d} mask, NaN/Inf in masked slots"),
        kernel,
    )
    .input(rng, &[b, h, s, d], dt)
    .input_of(&[b, kvh, t, d], dt, &kv)
    .input_of(&[b, kvh, t, d], dt, &vv)
    .view_of(&[1, 1, 1, t], dt, &mask, &[b, h, s, t], &[0, 0, 0, 1], 0)
    .output(&[b, h, s, d], dt)
}

pub fn cases(rng: &mut Rng, long: bool) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = vec![
        case(rng, [1, 12, 2, 37, 300, 64], BF16, true, false, 0, false),
        // the GEMM path (16 or more rows, dense operands)
        case(rng, [2, 6, 2, 40, 96, 48], F32, true, false, 3, false),
        case(rng, [2, 4, 4, 65, 65, 80], F32, false, true, 0, false),
        // decode: long context, a head dim not a multiple of 32 with the largest group, MHA
        case(rng, [1, 12, 2, 1, 2500, 128], F16, true, false, 0, false),
        case(rng, [2, 8, 1, 1, 300, 80], F32, true, false, 0, false),
        case(rng, [1, 4, 4, 1, 77, 64], BF16, false, false, 0, false),
        stale_decode_case(rng, [1, 12, 2, 700, 128], BF16),
        stale_decode_case(rng, [1, 8, 8, 100, 64], F16),
        // longer contexts: more splits per KV head, every block's range of stale slots
        stale_decode_case(rng, [1, 12, 2, 8500, 128], BF16),
        stale_decode_case(rng, [1, 4, 1, 8200, 64], F16),
        // many query rows (the CPU's GEMM path) over the same kind of cache
        stale_case(rng, [1, 6, 2, 20, 90, 32], F32),
        // 16-bit prefill (CUDA's tensor-core path): a Qwen-shaped block over a cache with a
        // partial last key tile, rows past the last query tile, causal without a mask, a
        // strided q, stale slots, and a head dim that is not a multiple of 16
        case(rng, [1, 12, 2, 128, 300, 128], F16, true, false, 0, false),
        case(rng, [2, 6, 2, 70, 150, 64], BF16, true, false, 5, false),
        case(rng, [1, 4, 4, 40, 40, 32], F16, false, true, 0, false),
        case(rng, [1, 4, 2, 33, 50, 64], F16, true, false, 0, true),
        stale_case(rng, [1, 12, 2, 80, 700, 128], BF16),
        stale_case(rng, [1, 6, 2, 20, 90, 32], F16),
        case(rng, [1, 4, 2, 20, 40, 80], F16, true, false, 0, false),
        // small shapes with a strided q
        case(rng, [2, 4, 2, 3, 9, 16], F32, false, false, 0, true),
        case(rng, [1, 6, 2, 7, 7, 8], F32, false, true, 0, true),
        case(rng, [1, 4, 1, 2, 33, 12], BF16, true, false, 0, true),
    ];
    if long {
        v.push(case(
            rng,
            [1, 12, 2, 1, 32768, 128],
            BF16,
            true,
            false,
            0,
            false,
        ));
    }
    // Decode shapes of the grouped split body (appended after the long case, so earlier
    // cases keep their random values): Qwen2.5-1.5B's group of 6 over a cache whose length
    // is not a multiple of a key block, with stale slots; a few causal rows over a group (a
    // chunk of rows per workgroup); rows that see nothing; a strided q; head dims of 256 in
    // f32 (one key slice) and bf16, and 64; a group whose rows no chunk size divides.
    v.extend([
        stale_decode_case(rng, [1, 12, 2, 1001, 128], BF16),
        case(rng, [1, 8, 2, 3, 150, 64], F32, false, true, 0, true),
        case(rng, [1, 6, 2, 4, 130, 64], BF16, true, false, 1, false),
        case(rng, [2, 4, 1, 2, 97, 256], F32, true, false, 0, false),
        case(rng, [1, 4, 2, 1, 200, 256], BF16, true, false, 0, false),
        case(rng, [1, 11, 1, 1, 70, 64], F16, true, false, 0, false),
        stale_case(rng, [1, 12, 2, 4, 300, 128], F16),
        // 16-bit decode on CUDA's tensor-core path: two batches over a cache whose mask the
        // kernel scans eight keys a load, and the largest group with a head dim of 32
        stale_decode_case(rng, [2, 8, 2, 520, 64], F16),
        case(rng, [2, 16, 2, 1, 260, 32], BF16, true, false, 0, false),
        // CUDA's clusters of a short cache's splits at their largest: 16 splits of two tiles
        stale_decode_case(rng, [1, 12, 2, 2048, 128], BF16),
    ]);
    v
}
