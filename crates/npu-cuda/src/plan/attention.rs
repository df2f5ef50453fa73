//! Attention: `k_attn_dec_mma` on tensor cores (16-bit) or `k_attn_dec` for one query row
//! (decode); for blocks of 16-bit query rows
//! (prefill) `k_attn_mma` on tensor cores after `k_attn_tiles` marks the mask's live tiles;
//! `k_attn` split over the keys otherwise, each SIMT kernel followed by `k_attn_combine`.

use super::persist::may_share;
use super::{align, kl, Planner, StepPlan, SCRATCH0};
use crate::launch::{Arg, Launch, TdArg};
use crate::loc::Loc;
use npu_ir::DType;
use npu_program::groups::{index_copy_axis, rope_cache};
use npu_program::program::{Binding, Kernel, Step};

/// The fewest query rows that take the tensor-core path (`attention_mma`).
const MMA_MIN_ROWS: usize = 16;

/// `k_attn_mma`'s query rows per block, keys per tile and largest head dim
/// (kernels/attention.cu: MQ_ROWS, MQ_KEYS, MQ_MAXD).
const MQ_ROWS: usize = 32;
const MQ_KEYS: usize = 64;
const MQ_MAXD: usize = 128;

/// `k_attn_dec_mma`'s keys per tile, tiles a split may hold and dynamic shared memory
/// (kernels/attention.cu: DM_KEYS, DM_MAXT, DM_SMEM_BYTES).
const DM_KEYS: usize = 64;
const DM_MAXT: usize = 1024;
const DM_SMEM_BYTES: u32 = (4 * DM_KEYS * (MQ_MAXD + 8) * 2 + DM_MAXT / 8) as u32;
/// Resident `k_attn_dec_mma` blocks per SM at most (3 x 69.8 KB of an H100's 228 KB; its
/// registers allow no more either): the split is sized so the grid is one wave of the blocks
/// an SM's shared memory holds, up to this (H100, Qwen2.5-1.5B decode at 32000 keys: 2.95 ms
/// at 3, 2.98 / 3.12 for 2 / 1.5 blocks per SM, 3.19 for two waves).
const DM_BLOCKS_PER_SM: usize = 3;
/// `k_attn_dec_mma_cl`'s largest cluster (kernels/attention.cu: DM_CL_MAX) and the most
/// tiles a split of it takes: a cache of up to 16 x 2 tiles (2048 keys) is merged inside one
/// launch, a longer one keeps its occupancy-sized splits and `k_attn_combine`.
const DM_CL_MAX: usize = 16;
const DM_CL_MAX_TILES: usize = 2;
/// Shared memory the driver reserves per resident block (compute capability 8.0 and later).
const SMEM_RESERVED_PER_BLOCK: usize = 1024;

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
            if let Some(plan) = self.attention_decode_mma(scale, ins, out) {
                return Ok(plan);
            }
            return Ok(self.attention_decode(scale, ins, out, b, h, kvh, t, d));
        }
        if s >= MMA_MIN_ROWS {
            if let Some(plan) = self.attention_mma(scale, causal, ins, out) {
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
        launches.push(self.combine(b * h * s, nsplit, out));
        Ok(StepPlan {
            launches,
            scratch: part_bytes,
        })
    }

    /// `k_attn_combine` over `rows` output rows of `nsplit` partials each (in the step's
    /// scratch): a block per row and 32 dims, 256 threads (eight warps sharing the splits).
    /// Tried before with one block per row of `d` threads per group of splits (256-1024
    /// threads) together with an early copy of `k_attn_dec_mma`'s first tile: decode got
    /// slower (H100, 1000 of 2048: 2.28 -> 2.39 ms; 32000: 2.85 -> 2.95), the two not separated.
    fn combine(&self, rows: usize, nsplit: usize, out: &Binding) -> Launch {
        let d = out.shape[out.shape.len() - 1];
        kl(
            self.f("k_attn_combine"),
            (rows as u32, d.div_ceil(32) as u32, 1),
            256,
            0,
            vec![
                Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                Arg::I32(nsplit as i32),
                Arg::Td(TdArg::of(out)),
            ],
        )
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
            self.combine(b * h, nsplit, out),
        ];
        StepPlan {
            launches,
            scratch: part_bytes,
        }
    }

    /// Whether q, K, V suit the tensor-core kernels (`k_attn_mma`, `k_attn_dec_mma`): f16 or
    /// bf16 of one dtype, a head dim that is a multiple of 16 up to 128, q's rows in 4-byte
    /// aligned pairs, compute capability 8.0 or later.
    fn mma_operands(&self, ins: &[Binding]) -> bool {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let (d, dt) = (q.shape[3], q.dtype);
        let pairs = q.strides[3] == 1
            && q.strides[..3].iter().all(|&st| st % 2 == 0)
            && q.byte_offset % 4 == 0;
        matches!(dt, DType::F16 | DType::BF16)
            && k.dtype == dt
            && v.dtype == dt
            && d % 16 == 0
            && d <= MQ_MAXD
            && pairs
            && self.dev.arch.0 >= 8
    }

    /// Decode attention on tensor cores (`k_attn_dec_mma`) over splits of whole 64-key tiles,
    /// about one wave of resident blocks in all, then `k_attn_combine`. `None` where it does
    /// not apply: q, K, V not 16-bit of one dtype, a head dim that is not a multiple of 16 up
    /// to 128, q's rows not in 4-byte aligned pairs, compute capability below 8.0
    /// (`mma_operands`), a block's tiles past the shared memory it may have, or
    /// `NPU_CUDA_DEC_MMA=0`. The caller has checked one query
    /// row, at most 8 heads per KV head and a mask shared by them.
    fn attention_decode_mma(&self, scale: f32, ins: &[Binding], out: &Binding) -> Option<StepPlan> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let (b, h, d) = (q.shape[0], q.shape[1], q.shape[3]);
        let (kvh, t) = (k.shape[1], k.shape[2]);
        if !self.dev.dec_mma || !self.mma_operands(ins) {
            return None;
        }
        let func = self.f("k_attn_dec_mma");
        if self.dev.smem_cap(func).ok()? < DM_SMEM_BYTES {
            return None;
        }
        let mask = ins.get(3).map_or(TdArg::null(), TdArg::of);
        let pre = self.cache_written_before(ins);
        if let Some(p) = self.attention_decode_cluster(scale, ins, out, mask, pre) {
            return Some(p);
        }
        let per_sm = (self.dev.smem_per_sm as usize
            / (DM_SMEM_BYTES as usize + SMEM_RESERVED_PER_BLOCK))
            .clamp(1, DM_BLOCKS_PER_SM);
        let want = (per_sm * self.dev.sms.max(1) as usize)
            .div_ceil(b * kvh)
            .max(1);
        let split_len =
            (t.div_ceil(want).div_ceil(DM_KEYS) * DM_KEYS).clamp(DM_KEYS, DM_KEYS * DM_MAXT);
        let nsplit = t.div_ceil(split_len).max(1);
        let part_bytes = align((b * h * nsplit * (d + 2) * 4) as u64);
        let launches = vec![
            kl(
                func,
                (nsplit as u32, (b * kvh) as u32, 1),
                128,
                DM_SMEM_BYTES,
                vec![
                    Arg::Td(TdArg::of(q)),
                    Arg::Td(TdArg::of(k)),
                    Arg::Td(TdArg::of(v)),
                    Arg::Td(mask),
                    Arg::I32(i32::from(ins.len() == 4)),
                    Arg::F32(scale),
                    Arg::I32((h / kvh) as i32),
                    Arg::I64(split_len as i64),
                    Arg::I32(nsplit as i32),
                    Arg::Ptr(0, Loc::Scratch(SCRATCH0)),
                    Arg::Td(pre.map_or(TdArg::null(), TdArg::of)),
                    Arg::I32(i32::from(pre.is_some())),
                ],
            ),
            self.combine(b * h, nsplit, out),
        ];
        Some(StepPlan {
            launches,
            scratch: part_bytes,
        })
    }

    /// `k_attn_dec_mma_cl`: a cache of at most [`DM_CL_MAX`] splits of up to
    /// [`DM_CL_MAX_TILES`] tiles, one cluster of its splits per (batch, KV head), merged in
    /// the cluster into `out`, so the step is one launch and no partials (decode at cache
    /// 2048: 16 splits of two tiles instead of 32 of one and `k_attn_combine`). None for a
    /// longer cache, an `out` that may share bytes with an operand, where the GPU cannot
    /// hold such a cluster (`Device::cluster_fits`), or with `NPU_CUDA_ATTN_CLUSTER=0`.
    fn attention_decode_cluster(
        &self,
        scale: f32,
        ins: &[Binding],
        out: &Binding,
        mask: TdArg,
        pre: Option<&Binding>,
    ) -> Option<StepPlan> {
        let (q, k) = (&ins[0], &ins[1]);
        let (b, h) = (q.shape[0], q.shape[1]);
        let (kvh, t) = (k.shape[1], k.shape[2]);
        // read at prepare time, so a test can compare both paths on one device
        if std::env::var("NPU_CUDA_ATTN_CLUSTER").is_ok_and(|v| v == "0") {
            return None;
        }
        let split_len = t.div_ceil(DM_CL_MAX).div_ceil(DM_KEYS).max(1) * DM_KEYS;
        if split_len > DM_CL_MAX_TILES * DM_KEYS {
            return None;
        }
        let nsplit = t.div_ceil(split_len).max(1);
        // its blocks store `out` while other clusters still read the operands
        if ins
            .iter()
            .chain(pre)
            .any(|x| may_share(self.program, out, x))
        {
            return None;
        }
        let func = self.f("k_attn_dec_mma_cl");
        if self.dev.smem_cap(func).ok()? < DM_SMEM_BYTES
            || !self
                .dev
                .cluster_fits(func, nsplit as u32, 128, DM_SMEM_BYTES)
        {
            return None;
        }
        let Launch::Kernel(mut kern) = kl(
            func,
            (nsplit as u32, (b * kvh) as u32, 1),
            128,
            DM_SMEM_BYTES,
            vec![
                Arg::Td(TdArg::of(q)),
                Arg::Td(TdArg::of(k)),
                Arg::Td(TdArg::of(&ins[2])),
                Arg::Td(mask),
                Arg::I32(i32::from(ins.len() == 4)),
                Arg::F32(scale),
                Arg::I32((h / kvh) as i32),
                Arg::I64(split_len as i64),
                Arg::I32(nsplit as i32),
                Arg::Td(TdArg::of(out)),
                Arg::Td(pre.map_or(TdArg::null(), TdArg::of)),
                Arg::I32(i32::from(pre.is_some())),
            ],
        ) else {
            return None;
        };
        kern.cluster = nsplit as u32;
        Some(StepPlan {
            launches: vec![Launch::Kernel(kern)],
            scratch: 0,
        })
    }

    /// The cache position index where the launch just before this step is the RoPE / cache
    /// group writing one position of this step's K and V (`npu_program::groups::rope_cache`,
    /// both writes from one index) and nothing this step reads before its programmatic wait
    /// (the mask, the caches' other rows, the index itself): `k_attn_dec_mma` then reads the
    /// mask, the index and its first K/V tile before the wait and re-reads only that
    /// position's row after it. None otherwise, or with `NPU_CUDA_ATTN_PRE=0`.
    fn cache_written_before(&self, ins: &[Binding]) -> Option<&Binding> {
        if std::env::var("NPU_CUDA_ATTN_PRE").is_ok_and(|v| v == "0") {
            return None;
        }
        let steps = &self.program.steps;
        // the group's first step: it has two to four steps and ends right before this one
        let (j, g) = (2..=4).find_map(|n| {
            let j = self.step.checked_sub(n)?;
            rope_cache(&steps[j..self.step])
                .filter(|g| g.len() == n)
                .map(|g| (j, g))
        })?;
        let (kw, vw) = (g.k_write?, g.v_write?);
        // one position written along the cache's sequence dim
        let one = |st: &Step| {
            let axis = index_copy_axis(st);
            axis == 2 && st.inputs[1].shape.get(axis) == Some(&1)
        };
        let same =
            kw.outputs[0] == ins[1] && vw.outputs[0] == ins[2] && kw.inputs[0] == vw.inputs[0];
        // and a GEMM's output right before the group: k_gemv16_rope (plan/gemv_rope.rs) runs
        // the group in that GEMM's launch
        let gemm_out = j
            .checked_sub(1)
            .map(|i| &steps[i])
            .filter(|s| matches!(s.kernel, Kernel::Gemm { .. }))
            .map(|s| &s.outputs[0]);
        let outs: Vec<&Binding> = [
            &g.q.outputs[0],
            &g.k.outputs[0],
            &kw.outputs[0],
            &vw.outputs[0],
        ]
        .into_iter()
        .chain(gemm_out)
        .collect();
        let apart = |t: &Binding| !outs.iter().any(|o| may_share(self.program, o, t));
        let index = &kw.inputs[0];
        let mask_apart = ins.get(3).is_none_or(apart);
        (same && one(kw) && one(vw) && mask_apart && apart(index)).then_some(index)
    }

    /// Prefill attention on tensor cores (`k_attn_mma`, kernels/attention.cu), with the mask's
    /// live (query tile, key tile) pairs marked first by `k_attn_tiles` so the kernel skips key
    /// tiles no row of its block attends (a prefill over a static cache sees a few of them).
    /// `None` where the kernel does not apply: not f16/bf16 of one dtype, a head dim that is
    /// not a multiple of 16 up to 128, q's rows not in 4-byte aligned pairs, or a GPU without
    /// bf16 `mma.sync` (compute capability below 8.0).
    fn attention_mma(
        &self,
        scale: f32,
        causal: bool,
        ins: &[Binding],
        out: &Binding,
    ) -> Option<StepPlan> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let (b, h, s) = (q.shape[0], q.shape[1], q.shape[2]);
        let (kvh, t) = (k.shape[1], k.shape[2]);
        if !self.mma_operands(ins) || h > 65535 || b > 65535 {
            return None;
        }
        let (nqt, nkt) = (s.div_ceil(MQ_ROWS), t.div_ceil(MQ_KEYS));
        let mask = ins.get(3);
        let mut launches = Vec::new();
        let mut flags = Loc::Null;
        if let Some(m) = mask {
            // Flags for each distinct (batch, head) row of the mask (broadcast dims count
            // once), marked by the first layer that reads this mask and kept for the others.
            let nb = if m.strides[0] != 0 { b } else { 1 };
            let nh = if m.strides[1] != 0 { h } else { 1 };
            let params = [nb, nh, nqt, nkt].map(|x| x as i64);
            let bytes = (nb * nh * nqt * nkt) as u64;
            let d = self
                .persist
                .borrow_mut()
                .derive(self.program, m, &params, bytes, self.step);
            flags = Loc::Persist(d.off);
            if d.compute {
                launches.push(kl(
                    self.f("k_attn_tiles"),
                    (nkt as u32, nqt as u32, (nb * nh) as u32),
                    256,
                    0,
                    vec![Arg::Td(TdArg::of(m)), Arg::Ptr(0, flags)],
                ));
            }
        }
        launches.push(kl(
            self.f("k_attn_mma"),
            (nqt as u32, h as u32, b as u32),
            // 2 row groups x 4 key slices of 32 threads
            256,
            0,
            vec![
                Arg::Td(TdArg::of(q)),
                Arg::Td(TdArg::of(k)),
                Arg::Td(TdArg::of(v)),
                Arg::Td(mask.map_or(TdArg::null(), TdArg::of)),
                Arg::I32(i32::from(mask.is_some())),
                Arg::I32(i32::from(causal)),
                Arg::F32(scale),
                Arg::I32((h / kvh) as i32),
                Arg::Ptr(0, flags),
                Arg::I32(nkt as i32),
                Arg::Td(TdArg::of(out)),
            ],
        ));
        Some(launches.into())
    }
}
