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

/// Whether launches are linked (`NPU_CUDA_SYNC`, off unless `1` while being measured).
pub(crate) fn enabled() -> bool {
    std::env::var("NPU_CUDA_SYNC").is_ok_and(|v| v == "1")
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
