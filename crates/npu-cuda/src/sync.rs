//! Counter-linked launches: consecutive kernels that both take `NPU_SYNC_PARAM`
//! (kernels/common.cuh, `NpuSync`) hand over through a counter in global memory instead of
//! the programmatic wait, which returns only after the whole predecessor grid has completed
//! and been flushed. The device code states the protocol; here each executable's launch list
//! is linked once, after planning: every kernel that takes the parameter gets one
//! ([`SyncArg`]), and a pair of consecutive such kernels shares a counter, the earlier
//! signalling it and the later waiting for it.
//!
//! Invariant: a counter is zero between runs. The successor's blocks count on after the
//! predecessor's and atomicInc wraps at their sum, so every complete run leaves it at zero;
//! the buffer is zeroed when the executable is made.

use crate::launch::{Arg, Launch};
use crate::loc::{Bases, Loc};

/// Bytes between two counters: a counter to an L2 line of its own, so the waiters' polls of
/// one do not share a line with the increments of the next.
pub(crate) const COUNTER_STRIDE: u64 = 128;

/// Whether launches are linked (unless `NPU_CUDA_SYNC=0`, for comparisons).
pub(crate) fn enabled() -> bool {
    std::env::var("NPU_CUDA_SYNC").map_or(true, |v| v != "0")
}

/// Nanoseconds a waiting block sleeps between two polls of its counter (`NPU_CUDA_SYNC_NS`,
/// default 0: spin), compiled into the kernels.
pub(crate) fn sleep_ns() -> u32 {
    std::env::var("NPU_CUDA_SYNC_NS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The kernels' `NpuSync`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NpuSync {
    pub wait: u64,
    pub sig: u64,
    pub wait_n: u32,
    pub wait_lim: u32,
    pub sig_lim: u32,
    pub pad: u32,
}

/// A kernel's `NpuSync` argument with its counters still symbolic.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SyncArg {
    pub raw: NpuSync,
    pub wait: Loc,
    pub sig: Loc,
}

impl SyncArg {
    /// Neither waits on a counter nor signals one: the kernel waits programmatically.
    pub fn none() -> SyncArg {
        SyncArg {
            raw: NpuSync::default(),
            wait: Loc::Null,
            sig: Loc::Null,
        }
    }

    pub fn relocate(&mut self, b: &Bases) {
        self.raw.wait = b.resolve(self.wait);
        self.raw.sig = b.resolve(self.sig);
    }
}

fn blocks(grid: (u32, u32, u32)) -> u32 {
    grid.0 * grid.1 * grid.2
}

/// Gives every kernel launch that `takes_sync` its `NpuSync` argument (last), linking
/// consecutive pairs of them through a counter where `link` is set, and returns how many
/// counters the run needs. A cuBLASLt or cuDNN call, or a kernel without the parameter,
/// breaks the chain: the kernel after it waits programmatically.
pub(crate) fn link(
    steps: &mut [Vec<Launch>],
    link: bool,
    takes_sync: impl Fn(&crate::launch::KernelLaunch) -> bool,
) -> u32 {
    let mut counters = 0u32;
    // the previous launch, where it takes the parameter: (step, index in step, blocks)
    let mut prev: Option<(usize, usize, u32)> = None;
    for si in 0..steps.len() {
        for li in 0..steps[si].len() {
            let Launch::Kernel(k) = &mut steps[si][li] else {
                prev = None;
                continue;
            };
            if !takes_sync(k) {
                prev = None;
                continue;
            }
            let n = blocks(k.grid);
            let mut arg = SyncArg::none();
            if let (true, Some((ps, pl, pn))) = (link, prev) {
                let c = Loc::Sync(u64::from(counters) * COUNTER_STRIDE);
                counters += 1;
                arg.wait = c;
                arg.raw.wait_n = pn;
                arg.raw.wait_lim = pn + n - 1;
                if let Launch::Kernel(p) = &mut steps[ps][pl] {
                    if let Some(Arg::Sync(s)) = p.args.last_mut() {
                        s.sig = c;
                        s.raw.sig_lim = pn + n - 1;
                    }
                }
            }
            if let Launch::Kernel(k) = &mut steps[si][li] {
                k.args.push(Arg::Sync(arg));
            }
            prev = Some((si, li, n));
        }
    }
    counters
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Func;
    use crate::launch::KernelLaunch;

    /// A launch of `blocks` blocks; `func` 1 stands for a kernel taking the parameter.
    fn k(func: usize, blocks: u32) -> Launch {
        Launch::Kernel(KernelLaunch {
            func: Func(func as _),
            grid: (blocks, 1, 1),
            block: (256, 1, 1),
            smem: 0,
            args: Vec::new(),
        })
    }

    fn sync_of(l: &Launch) -> Option<SyncArg> {
        match l {
            Launch::Kernel(k) => match k.args.last() {
                Some(Arg::Sync(s)) => Some(*s),
                _ => None,
            },
            _ => None,
        }
    }

    /// Consecutive kernels with the parameter share a counter across steps; one without it
    /// breaks the chain; the bounds are the two grids' blocks less one.
    #[test]
    fn consecutive_kernels_share_a_counter() {
        let mut steps = vec![
            vec![k(1, 4), k(1, 3)],
            vec![],
            vec![k(1, 5), k(2, 9), k(1, 2)],
        ];
        let n = link(&mut steps, true, |l| l.func.0 as usize == 1);
        assert_eq!(n, 2);
        let a = sync_of(&steps[0][0]).unwrap();
        let b = sync_of(&steps[0][1]).unwrap();
        let c = sync_of(&steps[2][0]).unwrap();
        assert!(
            sync_of(&steps[2][1]).is_none(),
            "a kernel without it gets none"
        );
        let d = sync_of(&steps[2][2]).unwrap();
        assert_eq!((a.wait, a.sig), (Loc::Null, Loc::Sync(0)));
        assert_eq!(a.raw.sig_lim, 4 + 3 - 1);
        assert_eq!((b.wait, b.sig), (Loc::Sync(0), Loc::Sync(COUNTER_STRIDE)));
        assert_eq!(
            (b.raw.wait_n, b.raw.wait_lim, b.raw.sig_lim),
            (4, 6, 3 + 5 - 1)
        );
        assert_eq!((c.wait, c.sig), (Loc::Sync(COUNTER_STRIDE), Loc::Null));
        assert_eq!((c.raw.wait_n, c.raw.wait_lim), (3, 7));
        assert_eq!((d.wait, d.sig), (Loc::Null, Loc::Null));
    }

    /// Unlinked, every kernel with the parameter still gets one, waiting programmatically.
    #[test]
    fn unlinked_kernels_get_an_empty_argument() {
        let mut steps = vec![vec![k(1, 4), k(1, 3)]];
        assert_eq!(link(&mut steps, false, |_| true), 0);
        for l in &steps[0] {
            let s = sync_of(l).unwrap();
            assert_eq!(
                (s.wait, s.sig, s.raw),
                (Loc::Null, Loc::Null, NpuSync::default())
            );
        }
    }
}
