//! L2 lookahead: the weight bytes a latency-bound launch fetches into L2 for the GEMMs after
//! it (`prefetch_l2_ahead`, kernels/common.cuh). A decode layer's attention chain (RoPE and
//! cache writes, attention, combine) leaves DRAM mostly idle for ~18 us on the H100; the
//! o-projection and gate/up GEMVs that follow stream 60 MB of weights.

use super::Planner;
use crate::launch::Arg;
use crate::loc::Loc;
use npu_program::program::Slot;

/// Bytes fetched ahead when `NPU_CUDA_LOOKAHEAD_KB` does not say: a part of the H100's 50 MB
/// L2 that leaves room for the activations and the attention's K/V stream.
const DEFAULT_BYTES: u64 = 32 << 20;

fn budget() -> u64 {
    std::env::var("NPU_CUDA_LOOKAHEAD_KB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(DEFAULT_BYTES, |kb| kb << 10)
}

impl Planner<'_> {
    /// `prefetch_l2_ahead`'s four arguments: the first bytes, up to the budget, of the
    /// weights that the next GEMMs from step `from` on read, as two (pointer, bytes) ranges
    /// (16-byte aligned, whole 16-byte lengths; a null pointer and 0 bytes where there is
    /// less). Only weights and constants: no step writes them, so the launch may fetch
    /// them before its programmatic wait.
    pub(crate) fn lookahead(&self, from: usize) -> [Arg; 4] {
        let mut left = budget();
        let mut ranges = [(Loc::Null, 0u64); 2];
        let mut n = 0;
        for s in self.program.steps.get(from..).unwrap_or_default() {
            if n == ranges.len() || left == 0 {
                break;
            }
            let Some((_, b, _, _)) = s.kernel.gemm_operands(&s.inputs) else {
                continue;
            };
            if !matches!(b.slot, Slot::Weight(_) | Slot::Const(_)) {
                continue;
            }
            let start = b.byte_offset.next_multiple_of(16);
            let bytes = (b.end_byte() & !15).saturating_sub(start).min(left);
            if bytes > 0 {
                ranges[n] = (Loc::Slot(b.slot, start), bytes);
                left -= bytes;
                n += 1;
            }
        }
        let [(p0, n0), (p1, n1)] = ranges;
        [
            Arg::Ptr(0, p0),
            Arg::I64(n0 as i64),
            Arg::Ptr(0, p1),
            Arg::I64(n1 as i64),
        ]
    }
}
