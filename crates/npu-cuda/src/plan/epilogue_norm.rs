//! A decoder's residual GEMM and the normalized GEMM that reads its output, with the first's
//! epilogue and the second's RMSNorm prologue in one `k_epilogue_rms` launch (a prefill has
//! two such pairs a layer: ncu gave the two launches 7.4 + 6.2 us of a 128-token prefill's
//! serialized time, 56 pairs a run).
//!
//! Both steps are planned as they would be alone; the pair is fused only where step one ends
//! in cuBLASLt into scratch plus `k_epilogue` and step two starts with `k_rms_norm` into its
//! scratch, so every other path (GEMV, SIMT, cuBLASLt writing the output) stays as it was.
//! The fused launch opens step two: by then step one's cuBLASLt call has written its f32
//! result, and nothing between them can overwrite it (per-step timings count the epilogue
//! under step two). `NPU_CUDA_FUSE_NORM=0` turns it off, for comparisons.

use super::{kl, Planner, StepPlan};
use crate::launch::{dtype_code, Arg, Launch, TdArg};
use crate::loc::Loc;
use npu_ir::DType;
use npu_program::program::{Kernel, Step};

/// Threads of a `k_epilogue_rms` block: `k_rms_norm`'s, whose chunk-to-thread map the fused
/// kernel must repeat for equal sums.
const THREADS: u32 = 256;
/// `RN8` in the kernels: 16-byte chunks a thread holds.
const CHUNKS_PER_THREAD: i64 = 4;

/// Rows of a 16-bit operand that can be read (or written) 16 bytes at a time: the last dim
/// contiguous, a multiple of 8 long, every row starting 16-byte aligned (row stride 0
/// included: a broadcast bias).
fn rows16(t: &TdArg) -> bool {
    let (td, r) = (&t.td, t.td.rank as usize);
    if ![DType::F16, DType::BF16].map(dtype_code).contains(&td.dt) {
        return false;
    }
    let aligned = match t.loc {
        Loc::Slot(_, off) => off % 16 == 0,
        Loc::Scratch(off) => off % 16 == 0,
        _ => false,
    };
    r >= 1
        && aligned
        && td.st[r - 1] == 1
        && td.sh[r - 1] % 8 == 0
        && td.st[..r - 1].iter().all(|s| (s * 2) % 16 == 0)
}

impl Planner<'_> {
    /// The plans of `steps[0]` and `steps[1]` where the second is a normalized GEMM reading
    /// the first's output and their launches allow the first's epilogue and the second's
    /// RMSNorm in one; None for other steps, where they do not fuse, or where either fails to
    /// plan (the caller plans them one at a time, and reports a failure). Unfused pairs are
    /// not claimed: step two may open a group of its own (a decode layer's q/k/v GEMV and the
    /// RoPE / cache group in one `k_gemv16_rope`), which claiming the pair hid in every layer
    /// after the first until the nineteenth session's timeline showed it.
    pub(crate) fn epilogue_norm(&self, steps: &[Step]) -> Option<[StepPlan; 2]> {
        if std::env::var("NPU_CUDA_FUSE_NORM").is_ok_and(|v| v == "0") {
            return None;
        }
        let [s0, s1, ..] = steps else { return None };
        let (Kernel::Gemm { act: None, .. }, Kernel::Gemm { norm: Some(_), .. }) =
            (&s0.kernel, &s1.kernel)
        else {
            return None;
        };
        let (_, _, Some(_), None) = s0.kernel.gemm_operands(&s0.inputs)? else {
            return None;
        };
        let (a1, ..) = s1.kernel.gemm_operands(&s1.inputs)?;
        if a1 != s0.outputs.first()? || s0.outputs.len() != 1 {
            return None;
        }
        let mut p0 = self.plan(s0).ok()?;
        let next = Planner {
            step: self.step + 1,
            ..*self
        };
        let mut p1 = next.plan(s1).ok()?;
        let fused = self.fused(&p0, &p1)?;
        p0.launches.pop();
        p1.launches[0] = fused;
        Some([p0, p1])
    }

    /// The fused launch where step one's plan is a cuBLASLt call into scratch and then
    /// `k_epilogue` with a bias and no activation, step two's opens with `k_rms_norm` of what
    /// that epilogue writes, and the operands fit `k_epilogue_rms`.
    fn fused(&self, p0: &StepPlan, p1: &StepPlan) -> Option<Launch> {
        let [Launch::Lt(_), epi] = &p0.launches[..] else {
            return None;
        };
        let [Arg::Ptr(_, Loc::Scratch(c_off)), _, Arg::Td(bias), Arg::I32(mode @ (1 | 2)), Arg::F32(beta), Arg::I32(-1), Arg::Td(out), Arg::I64(total)] =
            *self.args_of(epi, "k_epilogue")?
        else {
            return None;
        };
        let [Arg::Td(x), Arg::Td(w), Arg::F32(eps), Arg::Td(normed)] =
            *self.args_of(p1.launches.first()?, "k_rms_norm")?
        else {
            return None;
        };
        let same = |a: &TdArg, b: &TdArg| {
            a.loc == b.loc && a.td.sh == b.td.sh && a.td.st == b.td.st && a.td.dt == b.td.dt
        };
        let r = out.td.rank as usize;
        let n = out.td.sh[r - 1];
        let rows = out.td.sh[..r - 1].iter().product::<i64>();
        let Loc::Scratch(n_off) = normed.loc else {
            return None;
        };
        // step two's normalized a must not overlap step one's f32 result, which it reads
        let (c_end, n_end) = (c_off + total as u64 * 4, n_off + (rows * n * 2) as u64);
        let disjoint = n_off >= c_end || c_off >= n_end;
        let fits = same(&x, &out)
            && disjoint
            && [&out, &normed, &w, &bias].iter().all(|t| rows16(t))
            && normed.td.dt == out.td.dt
            && bias.td.dt == out.td.dt
            && n / 8 <= CHUNKS_PER_THREAD * i64::from(THREADS)
            && rows <= i64::from(u32::MAX);
        fits.then(|| {
            kl(
                self.f_dt(
                    "k_epilogue_rms",
                    &[bias.td.dt, out.td.dt, w.td.dt, normed.td.dt],
                ),
                (rows as u32, 1, 1),
                THREADS,
                0,
                vec![
                    Arg::Ptr(0, Loc::Scratch(c_off)),
                    Arg::Td(bias),
                    Arg::I32(mode),
                    Arg::F32(beta),
                    Arg::Td(out),
                    Arg::Td(w),
                    Arg::F32(eps),
                    Arg::Td(normed),
                ],
            )
        })
    }

    /// A launch's arguments when it launches the kernel `name`.
    fn args_of<'l>(&self, l: &'l Launch, name: &str) -> Option<&'l [Arg]> {
        match l {
            Launch::Kernel(k) if self.dev.is_func(k.func, name) => Some(&k.args),
            _ => None,
        }
    }
}
