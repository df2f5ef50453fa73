//! Data movement: embedding, index_copy into a donated cache, rotary embedding, copy with
//! conversion, fill.

use crate::case::{Case, Rng};
use npu_ir::DType;
use npu_program::program::Kernel;

pub fn cases(rng: &mut Rng) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = Vec::new();
    let ids: Vec<i64> = (0..13).map(|_| rng.below(1000) as i64).collect();
    v.push(
        Case::new("embedding bf16 1000x96", Kernel::Embedding)
            .input(rng, &[1000, 96], BF16)
            .int_input(&[1, 13], &ids)
            .output(&[1, 13, 96], BF16),
    );
    v.push(
        Case::new("embedding bf16 table into f32 2x3x6", Kernel::Embedding)
            .input(rng, &[11, 6], BF16)
            .int_input(&[2, 3], &[3, 0, 10, 7, 7, 1])
            .output(&[2, 3, 6], F32),
    );
    // The KV cache: program inputs [index, src, cache]; the step binds index and src and
    // writes the cache through the output that donates it.
    let (kvh, tmax, d, s) = (2, 300, 64, 7);
    let slots: Vec<i64> = (0..s as i64).map(|i| 100 + 3 * i).collect();
    v.push(
        Case::new(
            "index_copy bf16 into donated cache",
            Kernel::IndexCopy { axis: 2 },
        )
        .int_input(&[s], &slots)
        .input(rng, &[1, kvh, s, d], BF16)
        .input(rng, &[1, kvh, tmax, d], BF16)
        .in_place(),
    );
    v.push(
        Case::new(
            "index_copy f32 strided src into f32 cache",
            Kernel::IndexCopy { axis: 2 },
        )
        .int_input(&[3], &[5, 0, 8])
        .view(rng, &[2, 3, 4], F32, &[1, 2, 3, 4], &[0, 4, 8, 1], 0)
        .input(rng, &[1, 2, 9, 4], F32)
        .in_place(),
    );
    v.push(
        Case::new(
            "index_copy along the last axis, f32 rows into bf16",
            Kernel::IndexCopy { axis: 1 },
        )
        .int_input(&[2], &[6, 2])
        .view(rng, &[2, 3], F32, &[3, 2], &[1, 3], 0)
        .input(rng, &[3, 7], BF16)
        .in_place(),
    );
    v.push(
        Case::new("rope f32 [1,12,5,128] with broadcast cos/sin", Kernel::Rope)
            .input(rng, &[1, 12, 5, 128], F32)
            .view(rng, &[5, 128], F32, &[1, 12, 5, 128], &[0, 0, 128, 1], 0)
            .view(rng, &[5, 128], F32, &[1, 12, 5, 128], &[0, 0, 128, 1], 0)
            .output(&[1, 12, 5, 128], F32),
    );
    v.push(
        Case::new("rope bf16 [1,3,5,8] heads-interleaved x", Kernel::Rope)
            .view(rng, &[1, 5, 3, 8], BF16, &[1, 3, 5, 8], &[120, 8, 24, 1], 0)
            .view(rng, &[5, 8], BF16, &[1, 3, 5, 8], &[40, 0, 8, 1], 0)
            .view(rng, &[5, 8], BF16, &[1, 3, 5, 8], &[40, 0, 8, 1], 0)
            .output(&[1, 3, 5, 8], BF16),
    );
    v.push(
        Case::new("copy bf16 transposed -> f32 dense", Kernel::Copy)
            .view(rng, &[33, 47], BF16, &[47, 33], &[1, 47], 0)
            .output(&[47, 33], F32),
    );
    v.push(
        Case::new("copy f32 transposed -> f16", Kernel::Copy)
            .view(rng, &[5, 4], F32, &[4, 5], &[1, 4], 0)
            .output(&[4, 5], F16),
    );
    v.push(Case::new("fill f16", Kernel::Fill { value: -1.25 }).output(&[3, 77], F16));
    v.push(
        Case::new("fill f32 into a strided view", Kernel::Fill { value: 2.5 }).output_view(
            &[4, 6],
            F32,
            &[4, 3],
            &[6, 2],
        ),
    );
    v
}
