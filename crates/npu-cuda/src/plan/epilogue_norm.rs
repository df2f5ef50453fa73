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

use super::{Planner, StepPlan};
use crate::launch::{dtype_code, Arg, KernelLaunch, Launch, TdArg};
use crate::loc::Loc;
use npu_ir::DType;
use npu_program::program::{Kernel, Step};

/// Threads of a `k_epilogue_rms` block: `k_rms_norm`'s, whose chunk-to-thread map the fused
/// kernel must repeat for equal sums.
const THREADS: u32 = 256;
/// `RN8` in the kernels: 16-byte chunks a thread holds.
const CHUNKS_PER_THREAD: i64 = 4;

/// What the two steps' plans must contain for the fusion, taken from their launches.
struct Parts {
    /// Step one's f32 result in scratch (offset, bytes).
    c_off: u64,
    c_bytes: u64,
    bias: TdArg,
    mode: i32,
    beta: f32,
    out: TdArg,
    w: TdArg,
    eps: f32,
    normed: TdArg,
}

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
    /// The plans of `steps[0]` and `steps[1]` with the first's epilogue and the second's
    /// RMSNorm fused, or None where the pair does not qualify (the caller plans them apart).
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
        let parts = self.fusable(&p0, &p1)?;
        let Parts {
            c_off,
            c_bytes,
            bias,
            mode,
            beta,
            out,
            w,
            eps,
            normed,
        } = parts;
        let n = out.td.sh[out.td.rank as usize - 1];
        let rows = out.td.sh[..out.td.rank as usize - 1]
            .iter()
            .product::<i64>();
        let Loc::Scratch(n_off) = normed.loc else {
            return None;
        };
        let n_bytes = (rows * n * 2) as u64;
        let disjoint = n_off >= c_off + c_bytes || c_off >= n_off + n_bytes;
        if !(disjoint
            && [&out, &normed, &w, &bias].iter().all(|t| rows16(t))
            && out.td.dt == normed.td.dt
            && bias.td.dt == out.td.dt
            && n / 8 <= CHUNKS_PER_THREAD * i64::from(THREADS)
            && rows <= i64::from(u32::MAX))
        {
            return None;
        }
        let fused = Launch::Kernel(KernelLaunch {
            func: self.f("k_epilogue_rms"),
            grid: (rows as u32, 1, 1),
            block: (THREADS, 1, 1),
            smem: 0,
            args: vec![
                Arg::Ptr(0, Loc::Scratch(c_off)),
                Arg::Td(bias),
                Arg::I32(mode),
                Arg::F32(beta),
                Arg::Td(out),
                Arg::Td(w),
                Arg::F32(eps),
                Arg::Td(normed),
            ],
        });
        p0.launches.pop();
        p1.launches[0] = fused;
        Some([p0, p1])
    }

    /// The fusion's operands where step one's plan is a cuBLASLt call into scratch and then
    /// `k_epilogue` with a bias and no activation, and step two's opens with `k_rms_norm`.
    fn fusable(&self, p0: &StepPlan, p1: &StepPlan) -> Option<Parts> {
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
        // the norm reads exactly what the epilogue writes
        if x.loc != out.loc || x.td.sh != out.td.sh || x.td.st != out.td.st || x.td.dt != out.td.dt
        {
            return None;
        }
        Some(Parts {
            c_off,
            c_bytes: total as u64 * 4,
            bias,
            mode,
            beta,
            out,
            w,
            eps,
            normed,
        })
    }

    /// A launch's arguments when it launches the kernel `name`.
    fn args_of<'l>(&self, l: &'l Launch, name: &str) -> Option<&'l [Arg]> {
        match l {
            Launch::Kernel(k) if k.func.0 == self.f(name).0 => Some(&k.args),
            _ => None,
        }
    }
}
