//! GEMMs: the GEMV kernels for one-row products, cuBLASLt (plus the epilogue kernel) for
//! large ones, the SIMT kernel otherwise; the RMSNorm prologue of normalized GEMMs.

use super::{align, kl, Planner, StepPlan, SCRATCH0};
use crate::gemm::{epilogue, plan_lt, LtDest};
use crate::launch::{dtype_code, unary_code, Arg, Launch, TdArg};
use crate::loc::Loc;
use npu_ir::{DType, UnaryOp};
use npu_program::program::Binding;

/// Blocks per SM that `k_gemv16` is launched with at most (a wide matrix loops over its
/// column groups): the residency its 64 registers per thread (`__maxnreg__`) allow at 256
/// threads (bounding it to 5 or 6 blocks spills).
const GEMV16_BLOCKS_PER_SM: usize = 4;

/// Rows shorter than this (elements) keep `k_gemv16`'s blocks of 8 even where 12 would balance
/// the SMs: a warp streams such a row in one or two rounds of loads, so a block's time is its
/// start-up, not its bytes, and two blocks on an SM cost little more than one. Measured on
/// Qwen2.5-1.5B's decode (H200, eighteenth session, docs/cuda.md): blocks of 12 for the down
/// projection (K = 8960) alone -0.020 ms a step at 1000 and -0.060 at 32000 against both
/// projections; for the o projection (K = 1536) alone +0.024 at 32000 against neither. The o
/// GEMV follows the decode attention, whose blocks fill an SM's registers: presumably a block
/// of 12 warps (24K registers) becomes resident only when two of them have left, one of 8
/// after one, so its pre-wait prefetch starts later.
const GEMV16_W12_MIN_K: usize = 4096;

/// The fewest threads a `k_gemv16` block has (8 warps; 12 where `gemv16_warps` says).
const GEMV16_MIN_THREADS: usize = 8 * 32;

/// Whether k_gemv16's bf16 RMSNorm prologue is deferred to each column's sum (kernels/gemm.cu);
/// `NPU_CUDA_GEMV_NORM=exact` normalizes before the loop, rounding as the two kernels do.
pub(crate) fn gemv_norm_deferred() -> bool {
    std::env::var("NPU_CUDA_GEMV_NORM").map_or(true, |v| v != "exact")
}

/// k_gemv16's `has_norm` for a normalized GEMV: 2 where the deferred bf16 prologue reads the
/// norm weight into registers, eight elements a thread (bf16 operands, a contiguous weight, K
/// at most eight elements for each of the block's `GEMV16_MIN_THREADS`), else 1 (the weight
/// staged beside `a`, K * 2 bytes more shared memory a block).
fn gemv_norm_mode(deferred: bool, a: DType, nw: DType, nw_contiguous: bool, k: usize) -> i32 {
    let in_regs = deferred
        && a == DType::BF16
        && nw == DType::BF16
        && nw_contiguous
        && k.div_ceil(8) <= GEMV16_MIN_THREADS;
    if in_regs {
        2
    } else {
        1
    }
}

/// `k_gemv16`'s warps a block, one output column each: 12 where column groups of 8 would load
/// the SMs unevenly and groups of 12 evenly and the rows are long (`GEMV16_W12_MIN_K`), else
/// 8. Qwen2.5-1.5B's down projection (N = 1536, K = 8960) on 132 SMs: 192 blocks of 8 put two
/// on 60 SMs and one on 72, so the step takes two blocks' time for 1.45 blocks' bytes an SM;
/// 128 blocks of 12 put one on 128 SMs. At 384 threads its 64 registers allow two blocks an SM.
fn gemv16_warps(n: usize, k: usize, sms: usize) -> usize {
    // the busiest SM's share of the work (1: every SM equally busy), where one round of
    // blocks covers every group
    let balance = |warps: usize, per_sm: usize| {
        let blocks = n.div_ceil(warps);
        (blocks <= per_sm * sms).then(|| blocks as f64 / (sms * blocks.div_ceil(sms)) as f64)
    };
    match (balance(8, GEMV16_BLOCKS_PER_SM), balance(12, 2)) {
        (Some(b8), Some(b12)) if b12 > b8 + 0.1 && k >= GEMV16_W12_MIN_K => 12,
        _ => 8,
    }
}

/// The most bytes of its first weight row a `k_gemv16p` warp copies into shared memory
/// before its programmatic wait: the whole row of every Qwen2.5-1.5B GEMV but the down
/// projection, the first 16 KB of each of its rows. Measured on an H100 (docs/cuda.md,
/// twenty-fifth session): decode at 32000 of 32768 -0.060 ms, at 1000 of 2048 +0.008; the
/// down rows' copies alone +0.045 / +0.011, so they go with the others or not at all.
const GEMV_PRELOAD_MAX: usize = 16384;

/// The bytes of each warp's first weight row that `k_gemv16p` copies into shared memory
/// before its programmatic wait (kernels/gemm.cu, `preload_gemv_row`), for rows of `k`
/// elements: the row up to `GEMV_PRELOAD_MAX`, as far as `room` bytes of shared memory hold
/// it for `warps` warps, in whole 512-byte rounds (a 16-byte unit a lane). 0: none.
/// `NPU_CUDA_GEMV_PRELOAD=0` turns the copies off; `K:BYTES` pairs separated by `;` (`*` for
/// any K, an unlisted K none) ask other amounts, for A/B runs.
fn gemv_preload(k: usize, warps: usize, room: usize) -> usize {
    let asked = match std::env::var("NPU_CUDA_GEMV_PRELOAD") {
        Ok(spec) => spec
            .split(';')
            .filter_map(|kv| kv.split_once(':'))
            .find(|(key, _)| *key == "*" || key.parse() == Ok(k))
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0),
        Err(_) => GEMV_PRELOAD_MAX,
    };
    asked.min(k * 2).min(room / warps.max(1)) / 512 * 512
}

impl Planner<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm(
        &self,
        alpha: f32,
        beta: f32,
        act: i32,
        residual: bool,
        a: &Binding,
        b: &Binding,
        bias: Option<&Binding>,
        norm: Option<(f32, &Binding)>,
        out: &Binding,
    ) -> Result<StepPlan, String> {
        let (ra, r) = (a.shape.len(), out.shape.len());
        let (m, n, k) = (out.shape[r - 2], out.shape[r - 1], a.shape[ra - 1]);
        let ob = &out.shape[..r - 2];
        let batches: usize = ob.iter().product();
        let with = |last: [usize; 2]| -> Vec<usize> { ob.iter().copied().chain(last).collect() };
        let mut an = TdArg::of(a).aligned_to(&with([m, k]));
        let bn = TdArg::of(b).aligned_to(&with([k, n]));
        let biasn = bias.map(|x| TdArg::of(x).aligned_to(&out.shape));
        let bias_mode = match (bias.is_some(), residual) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        };
        let o = TdArg::of(out);
        let GemvPath { gemv, vec, raw16 } = gemv_path(&bn, a.dtype, b.dtype, m, k, batches);
        // The RMSNorm prologue: in k_gemv16's staging of a, or else one k_rms_norm launch
        // into scratch (after the cuBLASLt result) that the GEMM reads as its a.
        let mut pre = Vec::new();
        let mut norm_end = 0;
        let norm_arg = match norm {
            Some((eps, nw)) if raw16 => {
                let contiguous = nw.strides.last() == Some(&1);
                let mode = gemv_norm_mode(gemv_norm_deferred(), a.dtype, nw.dtype, contiguous, k);
                (TdArg::of(nw), mode, eps)
            }
            Some((eps, nw)) => {
                if ra != 2 {
                    return Err(format!(
                        "a normalized gemm needs a 2-D a, got {:?}",
                        a.shape
                    ));
                }
                let off = SCRATCH0 + align((batches * m * n * 4) as u64);
                norm_end = off + align((m * k * a.dtype.size_bytes()) as u64) - SCRATCH0;
                let normed = TdArg::scratch(off, a.dtype, &[m, k]);
                pre.push(kl(
                    self.f_dt("k_rms_norm", &[a, nw].map(|b| dtype_code(b.dtype))),
                    (m as u32, 1, 1),
                    256,
                    0,
                    vec![
                        Arg::Td(TdArg::of(a)),
                        Arg::Td(TdArg::of(nw)),
                        Arg::F32(eps),
                        Arg::Td(normed),
                    ],
                ));
                an = normed.aligned_to(&with([m, k]));
                (TdArg::null(), 0, 0.0)
            }
            None => (TdArg::null(), 0, 0.0),
        };
        let plan = self.gemm_paths(GemmPaths {
            alpha,
            beta,
            act,
            bias_mode,
            a_dtype: a.dtype,
            b_dtype: b.dtype,
            an,
            bn,
            biasn,
            o,
            norm: norm_arg,
            m,
            n,
            k,
            batches,
            gemv,
            vec,
            raw16,
            out_numel: out.numel(),
            out_dtype: out.dtype,
            lt_relu: false,
        })?;
        pre.extend(plan.launches);
        Ok(StepPlan {
            launches: pre,
            scratch: plan.scratch.max(norm_end),
        })
    }

    /// The GEMM's launches once its operands are bound (see `gemm`).
    pub(super) fn gemm_paths(&self, g: GemmPaths) -> Result<StepPlan, String> {
        let GemmPaths {
            alpha,
            beta,
            act,
            bias_mode,
            a_dtype,
            b_dtype,
            an,
            bn,
            biasn,
            o,
            norm,
            m,
            n,
            k,
            batches,
            gemv,
            vec,
            raw16,
            out_numel,
            ..
        } = g;
        let null = TdArg::null();
        if gemv {
            let (name, smem) = if raw16 {
                // a, then (normalized) the norm weight, both staged raw
                ("k_gemv16", k * 2 * (1 + usize::from(norm.1 == 1)))
            } else {
                ("k_gemv", k * 4)
            };
            // One warp per output column, 8 per block (4 per block, for more blocks at
            // N = 1536, measured slower on the H100: each block stages all of `a`), or 12
            // for k_gemv16 where that balances the SMs over long rows (`gemv16_warps`).
            // k_gemv16 loops over groups of a block's columns: at most
            // GEMV16_BLOCKS_PER_SM blocks of 8 per SM, each staging `a` once.
            let sms = self.dev.sms.max(1) as usize;
            let warps = if raw16 { gemv16_warps(n, k, sms) } else { 8 };
            let groups = n.div_ceil(warps);
            let blocks = if raw16 {
                groups.min(GEMV16_BLOCKS_PER_SM * sms)
            } else {
                groups
            };
            // The weight rows' first bytes before the wait (k_gemv16p), where no grid writes
            // them, in what the SM's shared memory holds for the grid's blocks an SM beside
            // their staging (1 KB an SM's block reserves)
            let per_sm = blocks.div_ceil(sms).max(1);
            let room = ((self.dev.smem_per_sm as usize) / per_sm)
                .min(self.dev.smem_optin as usize)
                .saturating_sub(smem + 1024);
            let wpre = if raw16 && self.read_only(&bn) {
                gemv_preload(k, warps, room)
            } else {
                0
            };
            let name = if wpre > 0 { "k_gemv16p" } else { name };
            // k_gemv16's instance fixes a's and b's dtype (one 16-bit dtype: raw16)
            let func = if raw16 {
                self.f_dt(name, &[dtype_code(a_dtype), dtype_code(b_dtype)])
            } else {
                self.f(name)
            };
            let launch = kl(
                func,
                (blocks as u32, batches.max(1) as u32, 1),
                32 * warps as u32,
                (smem + warps * wpre) as u32,
                vec![
                    Arg::Td(an),
                    Arg::Td(bn),
                    Arg::Td(biasn.unwrap_or(null)),
                    Arg::I32(bias_mode),
                    Arg::F32(alpha),
                    Arg::F32(beta),
                    Arg::I32(act),
                    Arg::Td(o),
                    Arg::I32(i32::from(vec)),
                ],
            );
            let launch = match launch {
                Launch::Kernel(mut kern) if raw16 => {
                    // k_gemv16 has no `vec` flag; it takes the norm prologue's operands
                    kern.args.pop();
                    kern.args.push(Arg::Td(norm.0));
                    kern.args.push(Arg::I32(norm.1));
                    kern.args.push(Arg::F32(norm.2));
                    if wpre > 0 {
                        kern.args.push(Arg::I32(wpre as i32));
                    }
                    Launch::Kernel(kern)
                }
                other => other,
            };
            return Ok(StepPlan {
                launches: vec![launch],
                scratch: 0,
            });
        }
        if m * n * k >= 32 * 32 * 32 {
            let lt = |dest| {
                plan_lt(
                    self.dev,
                    self.lt_cold,
                    &an,
                    &bn,
                    a_dtype,
                    b_dtype,
                    m as i64,
                    n as i64,
                    k as i64,
                    batches as i64,
                    alpha,
                    dest,
                )
                .map_err(|e| e.to_string())
            };
            // cuBLASLt writes the output itself where it can. Not a residual: the contract
            // rounds the product before adding it, as PyTorch's two ops do, and cuBLASLt's C
            // operand rounds once (measured on the H100 through C: prefill 3.49 -> 3.30 ms;
            // docs/cuda.md, fifth session of 2026-11-26, says what the model check showed).
            if let Some(call) = self.lt_direct(&g, None)? {
                return Ok(vec![call].into());
            }
            let d_off = SCRATCH0;
            let lt = lt(LtDest::Scratch {
                off: d_off,
                ld: n as i64,
                batch: (m * n) as i64,
            })?;
            if let Some(call) = lt {
                let total = out_numel;
                let epi = epilogue(
                    self.dev,
                    d_off,
                    (m * n) as i64,
                    biasn.map(|b| (b, bias_mode)),
                    beta,
                    act,
                    o,
                    total,
                );
                return Ok(StepPlan {
                    launches: vec![Launch::Lt(Box::new(call)), epi],
                    scratch: align((batches * m * n * 4) as u64),
                });
            }
        }
        Ok(StepPlan {
            launches: vec![self.simt_gemm(
                an,
                bn,
                biasn.map(|b| (b, bias_mode)),
                alpha,
                beta,
                act,
                o,
                m,
                n,
                batches,
            )],
            scratch: 0,
        })
    }

    /// cuBLASLt writing the output itself, in its dtype: no activation (or ReLU where
    /// `lt_relu`), at most a plain bias vector, and with `c` a residual added as the C
    /// operand (scaled by its f32). `None` when the GEMM does not fit that (the caller plans
    /// another path).
    pub(super) fn lt_direct(
        &self,
        g: &GemmPaths,
        c: Option<(TdArg, f32)>,
    ) -> Result<Option<Launch>, String> {
        let plain_bias = g.bias_mode == 0 || (g.bias_mode == 1 && g.beta == 1.0);
        let relu = g.lt_relu && g.act == unary_code(Some(UnaryOp::Relu));
        if g.gemv
            || g.m * g.n * g.k < 32 * 32 * 32
            || !(g.act < 0 || relu)
            || !plain_bias
            || g.biasn.is_some_and(|b| b.td.dt != g.o.td.dt)
        {
            return Ok(None);
        }
        let call = plan_lt(
            self.dev,
            self.lt_cold,
            &g.an,
            &g.bn,
            g.a_dtype,
            g.b_dtype,
            g.m as i64,
            g.n as i64,
            g.k as i64,
            g.batches as i64,
            g.alpha,
            LtDest::Out {
                out: g.o,
                dtype: g.out_dtype,
                bias: g.biasn,
                relu,
                residual: c,
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(call.map(|c| Launch::Lt(Box::new(c))))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn simt_gemm(
        &self,
        a: TdArg,
        b: TdArg,
        bias: Option<(TdArg, i32)>,
        alpha: f32,
        beta: f32,
        act: i32,
        out: TdArg,
        m: usize,
        n: usize,
        batches: usize,
    ) -> Launch {
        let (bias, mode) = bias.map_or((TdArg::null(), 0), |(b, m)| (b, m));
        kl(
            self.f("k_gemm"),
            (
                n.div_ceil(64) as u32,
                m.div_ceil(64) as u32,
                batches.max(1) as u32,
            ),
            256,
            0,
            vec![
                Arg::Td(a),
                Arg::Td(b),
                Arg::Td(bias),
                Arg::I32(mode),
                Arg::F32(alpha),
                Arg::F32(beta),
                Arg::I32(act),
                Arg::Td(out),
            ],
        )
    }
}

/// Whether a GEMM takes the GEMV kernels, and which.
pub(super) struct GemvPath {
    /// One row of a, b contiguous along K: `k_gemv16` or `k_gemv`.
    pub gemv: bool,
    /// 16-bit b with 16-byte aligned rows (`k_gemv`'s vector loads).
    pub vec: bool,
    /// Same 16-bit dtype on both sides: `k_gemv16`, a staged raw (half the shared memory).
    pub raw16: bool,
}

/// The GEMV decision for D[batches, m, n] = a @ b with b bound as `bn` (rank >= 2).
pub(super) fn gemv_path(
    bn: &TdArg,
    a_dtype: DType,
    b_dtype: DType,
    m: usize,
    k: usize,
    batches: usize,
) -> GemvPath {
    let r = bn.td.rank as usize;
    let (b_sk, b_sn) = (bn.td.st[r - 2], bn.td.st[r - 1]);
    let gemv =
        m == 1 && b_sk == 1 && (1..=12288).contains(&k) && batches <= 65535 && b_dtype.is_float();
    let off_ok = matches!(bn.loc, Loc::Slot(_, off) if off % 16 == 0);
    let bs_ok = (0..r - 2).all(|d| bn.td.st[d] % 8 == 0);
    let vec = b_dtype.size_bytes() == 2 && k.is_multiple_of(8) && b_sn % 8 == 0 && off_ok && bs_ok;
    GemvPath {
        gemv,
        vec,
        raw16: gemv && vec && a_dtype == b_dtype,
    }
}

/// A GEMM's bound operands and the path facts `gemm` decided (see `gemm_paths`).
#[derive(Clone, Copy)]
pub(super) struct GemmPaths {
    pub alpha: f32,
    pub beta: f32,
    pub act: i32,
    pub bias_mode: i32,
    pub a_dtype: npu_ir::DType,
    pub b_dtype: npu_ir::DType,
    pub an: TdArg,
    pub bn: TdArg,
    pub biasn: Option<TdArg>,
    pub o: TdArg,
    /// k_gemv16's norm prologue operands: weight, on, eps.
    pub norm: (TdArg, i32, f32),
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batches: usize,
    pub gemv: bool,
    pub vec: bool,
    pub raw16: bool,
    pub out_numel: usize,
    pub out_dtype: npu_ir::DType,
    /// cuBLASLt's own ReLU may serve `act` (its NaN handling measured to match `relu`).
    pub lt_relu: bool,
}

#[cfg(test)]
mod tests {
    use super::{gemv16_warps, gemv_norm_mode};
    use npu_ir::DType;

    #[test]
    fn the_norm_weight_in_registers_only_for_deferred_bf16_rows_of_at_most_2048() {
        // Qwen2.5-1.5B's q/k/v and gate/up (K = 1536) and the LM head
        assert_eq!(
            gemv_norm_mode(true, DType::BF16, DType::BF16, true, 1536),
            2
        );
        assert_eq!(
            gemv_norm_mode(true, DType::BF16, DType::BF16, true, 2048),
            2
        );
        // longer rows, another dtype, a strided or f32 weight, or the exact prologue: staged
        assert_eq!(
            gemv_norm_mode(true, DType::BF16, DType::BF16, true, 2056),
            1
        );
        assert_eq!(gemv_norm_mode(true, DType::F16, DType::F16, true, 1536), 1);
        assert_eq!(gemv_norm_mode(true, DType::BF16, DType::F32, true, 1536), 1);
        assert_eq!(
            gemv_norm_mode(true, DType::BF16, DType::BF16, false, 1536),
            1
        );
        assert_eq!(
            gemv_norm_mode(false, DType::BF16, DType::BF16, true, 1536),
            1
        );
    }

    #[test]
    fn gemv_blocks_of_twelve_warps_only_where_they_balance_the_sms_over_long_rows() {
        // Qwen2.5-1.5B on an H100 / H200 (132 SMs): down (1536 x 8960) takes 12, o (1536 x
        // 1536) 8 (short rows), q/k/v (2048) 8 (256 blocks: two on 124 SMs), gate/up (17920)
        // 8 (more groups than blocks)
        assert_eq!(gemv16_warps(1536, 8960, 132), 12);
        assert_eq!(gemv16_warps(1536, 1536, 132), 8);
        assert_eq!(gemv16_warps(1536, 4096, 132), 12);
        assert_eq!(gemv16_warps(2048, 8960, 132), 8);
        assert_eq!(gemv16_warps(17920, 1536, 132), 8);
        // an A100 (108 SMs): 192 blocks of 8 are the better fit
        assert_eq!(gemv16_warps(1536, 8960, 108), 8);
        assert_eq!(gemv16_warps(8, 8960, 132), 8);
    }
}
