//! Attention: `k_attn_dec` for one query row (decode); for blocks of
//! query rows (prefill) two cuBLASLt GEMMs around `k_attn_softmax`; `k_attn` split over the
//! keys otherwise, each SIMT kernel followed by `k_attn_combine`.

use super::{align, kl, Planner, StepPlan, SCRATCH0};
use crate::gemm::{plan_lt, LtDest};
use crate::launch::{grid_for, Arg, Launch, TdArg};
use crate::loc::Loc;
use npu_ir::DType;
use npu_program::program::Binding;

/// The fewest query rows that take the GEMM path (`attention_gemm`).
const GEMM_MIN_ROWS: usize = 16;

/// The most scratch the GEMM path may take (scores, probabilities, output); larger problems
/// (a long prefill over a long cache) stay on `k_attn`, which needs none of it.
const GEMM_MAX_SCRATCH: u64 = 128 << 20;

impl Planner<'_> {
    pub(super) fn attention(
        &self,
        scale: f32,
        causal: bool,
        ins: &[Binding],
        out: &Binding,
    ) -> Result<StepPlan, String> {
        let (q, k) = (&ins[0], &ins[1]);
        let (b, h, s, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
        let (kvh, t) = (k.shape[1], k.shape[2]);
        // This backend's limits; the shapes themselves follow the kernel contract.
        if d > 256 || d == 0 {
            return Err(format!("head dim {d} is outside 1..=256"));
        }
        if s > 65535 || b * kvh > 65535 {
            return Err(format!(
                "{s} query rows or {} batch x kv heads exceed the grid",
                b * kvh
            ));
        }
        let group = h / kvh;
        let mask = ins.get(3);
        // One query row, the heads of a KV group sharing one mask row: the decode kernel
        // (H100, Qwen2.5-1.5B decode step: 1.40 vs 1.69 ms of attention in k_attn at 2048
        // keys; at 32000 keys 3.72 vs 4.78 ms a step since its loads are all in flight).
        let shared_mask = mask.is_none_or(|m| m.strides[1] == 0 || group == 1);
        if s == 1 && !causal && group <= 8 && d <= 128 && shared_mask {
            return Ok(self.attention_decode(scale, ins, out, b, h, kvh, t, d));
        }
        if s >= GEMM_MIN_ROWS && !causal {
            if let Some(plan) = self.attention_gemm(scale, ins, out)? {
                return Ok(plan);
            }
        }
        let nw = group.min(8);
        let base_blocks = b * kvh * s * group.div_ceil(nw);
        let want = (2 * self.dev.sms.max(1) as usize).div_ceil(base_blocks.max(1));
        let max_splits = t.div_ceil(128).max(1);
        let nsplit0 = want.clamp(1, max_splits);
        let split_len = t.div_ceil(nsplit0).div_ceil(32) * 32;
        let nsplit = t.div_ceil(split_len.max(1)).max(1);
        let part_bytes = align((b * h * s * nsplit * (d + 2) * 4) as u64);
        // K tile [32][d + 1], V tile [32][d], q rows [nw][d], probabilities [nw][32]
        let smem = ((32 * (d + 1) + 32 * d + nw * d + nw * 32) * 4) as u32;
        let mask = ins.get(3).map_or(TdArg::null(), TdArg::of);
        let mut launches = Vec::new();
        for hbase in (0..group).step_by(nw) {
            launches.push(kl(
                self.f("k_attn"),
                (nsplit as u32, s as u32, (b * kvh) as u32),
                (32 * nw) as u32,
                smem,
                vec![
                    Arg::Td(TdArg::of(q)),
                    Arg::Td(TdArg::of(k)),
                    Arg::Td(TdArg::of(&ins[2])),
                    Arg::Td(mask),
                    Arg::I32(i32::from(ins.len() == 4)),
                    Arg::I32(i32::from(causal)),
                    Arg::F32(scale),
                    Arg::I32(group as i32),
                    Arg::I32(hbase as i32),
                    Arg::I64(split_len as i64),
                    Arg::I32(nsplit as i32),
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                ],
            ));
        }
        launches.push(kl(
            self.f("k_attn_combine"),
            ((b * h * s) as u32, 1, 1),
            128,
            0,
            vec![
                Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                Arg::I32(nsplit as i32),
                Arg::Td(TdArg::of(out)),
            ],
        ));
        Ok(StepPlan {
            launches,
            scratch: part_bytes,
        })
    }

    /// `k_attn_dec` over splits of at least 32 keys, about two blocks per SM in all, then
    /// `k_attn_combine`.
    #[allow(clippy::too_many_arguments)]
    fn attention_decode(
        &self,
        scale: f32,
        ins: &[Binding],
        out: &Binding,
        b: usize,
        h: usize,
        kvh: usize,
        t: usize,
        d: usize,
    ) -> StepPlan {
        let want = (2 * self.dev.sms.max(1) as usize).div_ceil(b * kvh).max(1);
        let split_len = t.div_ceil(want).div_ceil(32).max(1) * 32;
        let nsplit = t.div_ceil(split_len).max(1);
        let part_bytes = align((b * h * nsplit * (d + 2) * 4) as u64);
        let mask = ins.get(3).map_or(TdArg::null(), TdArg::of);
        let launches = vec![
            kl(
                self.f("k_attn_dec"),
                (nsplit as u32, (b * kvh) as u32, 1),
                128,
                0,
                vec![
                    Arg::Td(TdArg::of(&ins[0])),
                    Arg::Td(TdArg::of(&ins[1])),
                    Arg::Td(TdArg::of(&ins[2])),
                    Arg::Td(mask),
                    Arg::I32(i32::from(ins.len() == 4)),
                    Arg::F32(scale),
                    Arg::I32((h / kvh) as i32),
                    Arg::I64(split_len as i64),
                    Arg::I32(nsplit as i32),
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                ],
            ),
            kl(
                self.f("k_attn_combine"),
                ((b * h) as u32, 1, 1),
                128,
                0,
                vec![
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                    Arg::I32(nsplit as i32),
                    Arg::Td(TdArg::of(out)),
                ],
            ),
        ];
        StepPlan {
            launches,
            scratch: part_bytes,
        }
    }
    /// Prefill attention as S = scale * Q K^T (cuBLASLt, f32, batched over batch x KV head:
    /// the `group` query heads of a KV head are one [group * S, D] matrix), P =
    /// `k_attn_softmax`(S + mask) in V's dtype, O = P V (cuBLASLt, f32) and a copy into
    /// `out`. A prefill over a static cache scores every cache slot, masked ones included:
    /// on tensor cores that costs less than `k_attn`'s one-warp-per-row SIMT loop (H100,
    /// Qwen2.5-1.5B, 128 rows over 2048 slots: 80 us per layer in `k_attn`). Masked slots
    /// get probability exactly 0 and a fully masked row is zeros, as in `k_attn`; unlike it,
    /// a masked slot's V row is multiplied by that 0 (PyTorch's math attention does the same).
    /// `None` when Q, K or V is not dense, the dtypes differ, or the scratch would exceed
    /// `GEMM_MAX_SCRATCH`.
    fn attention_gemm(
        &self,
        scale: f32,
        ins: &[Binding],
        out: &Binding,
    ) -> Result<Option<StepPlan>, String> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let (b, h, s, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
        let (kvh, t) = (k.shape[1], k.shape[2]);
        let group = h / kvh;
        let dense = |x: &Binding, rows: usize, heads: usize| {
            let st = &x.strides;
            st[3] == 1 && st[2] == d && st[1] == rows * d && (b == 1 || st[0] == heads * rows * d)
        };
        let dt = v.dtype;
        if q.dtype != dt
            || k.dtype != dt
            || dt == DType::F64
            || !dt.is_float()
            || !dense(q, s, h)
            || !dense(k, t, kvh)
            || !dense(v, t, kvh)
        {
            return Ok(None);
        }
        let (bk, rows) = (b * kvh, group * s);
        let s_off = SCRATCH0;
        let p_off = s_off + align((b * h * s * t * 4) as u64);
        let o_off = p_off + align((b * h * s * t * dt.size_bytes()) as u64);
        let end = o_off + align((b * h * s * d * 4) as u64);
        if end - SCRATCH0 > GEMM_MAX_SCRATCH {
            return Ok(None);
        }
        // A [bk, rows, k] operand over `x`'s storage with the given strides.
        let view = |x: &Binding, sh: [usize; 3], st: [usize; 3]| {
            TdArg::of(x).laid_out(&sh.map(|v| v as i64), &st.map(|v| v as i64))
        };
        let qa = view(q, [bk, rows, d], [rows * d, d, 1]);
        let kt = view(k, [bk, d, t], [t * d, 1, d]);
        let lt = |a: &TdArg, bm: &TdArg, m: usize, n: usize, kk: usize, alpha, dest| {
            plan_lt(
                self.dev, a, bm, dt, dt, m as i64, n as i64, kk as i64, bk as i64, alpha, dest,
            )
            .map_err(|e| e.to_string())
        };
        let to_scratch = |off, m: usize, n: usize| LtDest::Scratch {
            off,
            ld: n as i64,
            batch: (m * n) as i64,
        };
        let Some(scores) = lt(&qa, &kt, rows, t, d, scale, to_scratch(s_off, rows, t))? else {
            return Ok(None);
        };
        let pa = TdArg::scratch(p_off, dt, &[bk, rows, t]);
        let vb = view(v, [bk, t, d], [t * d, d, 1]);
        let mask = ins.get(3);
        let mut launches = vec![
            Launch::Lt(Box::new(scores)),
            kl(
                self.f("k_attn_softmax"),
                ((b * h * s) as u32, 1, 1),
                256,
                0,
                vec![
                    Arg::Td(TdArg::scratch(s_off, DType::F32, &[b, h, s, t])),
                    Arg::Td(mask.map_or(TdArg::null(), TdArg::of)),
                    Arg::I32(i32::from(mask.is_some())),
                    Arg::Td(TdArg::scratch(p_off, dt, &[b, h, s, t])),
                ],
            ),
        ];
        // O = P V straight into a dense output, else through f32 scratch and a copy.
        let direct = if dense(out, s, h) && out.dtype == dt {
            lt(
                &pa,
                &vb,
                rows,
                d,
                t,
                1.0,
                LtDest::Out {
                    out: view(out, [bk, rows, d], [rows * d, d, 1]),
                    dtype: dt,
                    bias: None,
                },
            )?
        } else {
            None
        };
        if let Some(values) = direct {
            launches.push(Launch::Lt(Box::new(values)));
        } else {
            let Some(values) = lt(&pa, &vb, rows, d, t, 1.0, to_scratch(o_off, rows, d))? else {
                return Ok(None);
            };
            launches.push(Launch::Lt(Box::new(values)));
            launches.push(kl(
                self.f("k_copy"),
                (grid_for(out.numel()), 1, 1),
                256,
                0,
                vec![
                    Arg::Td(TdArg::scratch(o_off, DType::F32, &[b, h, s, d])),
                    Arg::Td(TdArg::of(out)),
                    Arg::I64(out.numel() as i64),
                ],
            ));
        }
        Ok(Some(StepPlan {
            launches,
            scratch: end - SCRATCH0,
        }))
    }
}
