//! Attention: `k_attn_dec` for one query row over at most `DECODE_MAX_T` keys, `k_attn`
//! split over the keys otherwise, each followed by `k_attn_combine`.

use super::{align, kl, Planner, StepPlan, SCRATCH0};
use crate::launch::{Arg, TdArg};
use crate::loc::Loc;
use npu_compiler::program::Binding;

/// The longest context `k_attn_dec` takes (see `attention`): measured faster at 2048 keys,
/// slower at 32768; where they cross is not measured.
const DECODE_MAX_T: usize = 8192;

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
        // One query row, the heads of a KV group sharing one mask row: the decode kernel,
        // up to DECODE_MAX_T keys (H100: 1.40 vs 1.69 ms of attention per step at 2048
        // keys, but 6.0 vs ~4.2 ms at 32768, where k_attn's longer splits win).
        let shared_mask = mask.is_none_or(|m| m.strides[1] == 0 || group == 1);
        if s == 1 && !causal && group <= 8 && d <= 128 && t <= DECODE_MAX_T && shared_mask {
            return Ok(self.attention_decode(scale, ins, out, b, h, kvh, t, d));
        }
        let nw = group.min(8);
        let base_blocks = b * kvh * s * group.div_ceil(nw);
        let want = (2 * self.dev.sms.max(1) as usize).div_ceil(base_blocks.max(1));
        let max_splits = t.div_ceil(128).max(1);
        let nsplit0 = want.clamp(1, max_splits);
        let split_len = t.div_ceil(nsplit0).div_ceil(32) * 32;
        let nsplit = t.div_ceil(split_len.max(1)).max(1);
        let part_bytes = align((b * h * s * nsplit * (d + 2) * 4) as u64);
        let smem = ((32 * (d + 1) + 32 * d + nw * d) * 4) as u32;
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
}
