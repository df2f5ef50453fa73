//! The suite's cases, one file per kernel family. Shapes are chosen for the paths backends
//! take (GEMV, tensor-core GEMM, SIMT fallbacks, direct grouped convolutions, warp-per-row
//! reductions, split-K decode attention) and for what breaks them: odd sizes, batch > 1,
//! transposed, strided and broadcast (stride 0) operands, padded outputs, f32/f16/bf16
//! storage, NaN and infinities.

mod attention;
mod conv;
mod gather;
mod gemm;
mod pointwise;
mod pool;
mod rows;

use crate::case::{Case, Rng};

/// A family of kernel kinds: one test per family per backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Gemm,
    Conv,
    Pool,
    Pointwise,
    Rows,
    Gather,
    Attention,
}

impl Family {
    pub const ALL: [Family; 7] = [
        Family::Gemm,
        Family::Conv,
        Family::Pool,
        Family::Pointwise,
        Family::Rows,
        Family::Gather,
        Family::Attention,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Gemm => "gemm",
            Family::Conv => "conv",
            Family::Pool => "pool",
            Family::Pointwise => "pointwise",
            Family::Rows => "rows",
            Family::Gather => "gather",
            Family::Attention => "attention",
        }
    }
}

/// The cases of one family, from a seed. `long` adds the 32k-context decode attention.
pub fn cases(family: Family, seed: u64, long: bool) -> Vec<Case> {
    let mut rng = Rng::new(seed);
    let rng = &mut rng;
    match family {
        Family::Gemm => gemm::cases(rng),
        Family::Conv => conv::cases(rng),
        Family::Pool => pool::cases(rng),
        Family::Pointwise => pointwise::cases(rng),
        Family::Rows => rows::cases(rng),
        Family::Gather => gather::cases(rng),
        Family::Attention => attention::cases(rng, long),
    }
}
