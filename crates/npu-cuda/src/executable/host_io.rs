//! A host run's inputs and small outputs crossing the host link inside the run itself, so a
//! replay of the captured graph carries them and the host makes one driver call a run.
//!
//! Inputs: the run's first kernels (`k_copy_gated`) copy each input from its page-locked
//! staging, through the staging's mapped device address, chunk by chunk, each chunk once the
//! host has published it by setting its gate word (page-locked too). So a replay is launched
//! *before* the host converts the inputs: the launch and the graph's start overlap the
//! conversion, and each chunk's copy overlaps the next one's conversion, with no driver call
//! from the converting threads. Outputs of at most [`OUT_IN_GRAPH_MAX`] bytes and the error
//! word are written into their staging by `k_copy_bytes` after the last step; larger outputs
//! keep a copy-engine download after the graph.
//!
//! Invariants: staging, gates and device buffers never move, so the captured copies stay
//! valid for every later run; the gates are zeroed before a run's kernels start and every gate
//! is set before the host waits for the run (`Gates::open_all` on every error path), so no
//! run waits on a gate forever. A run through caller-owned device memory (`run_device`) uses a
//! graph without these copies.

use super::staging::{ChunkPlan, Pinned};
use crate::device::{DevBuf, Device};
use crate::error::CudaResult;
use crate::launch::{Arg, KernelLaunch};
use crate::loc::Loc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The largest output (bytes) written into its staging inside the graph.
pub(super) const OUT_IN_GRAPH_MAX: usize = super::staging::CHUNK;
/// Chunk of a small input: a 224x224 f16 image is five, each converted in a few
/// microseconds while the previous one crosses the link.
const SMALL_CHUNK: usize = 64 << 10;
const THREADS: u32 = 256;

/// Whether runs copy inside the graph (`NPU_CUDA_GRAPH_IO=0` turns it off, for comparisons).
fn on_from_env() -> bool {
    std::env::var("NPU_CUDA_GRAPH_IO").map_or(true, |v| v != "0")
}

/// The gate words, one per input chunk, in page-locked memory the kernels poll.
pub(super) struct Gates {
    words: Pinned,
}

// SAFETY: through `&Gates` the words are only accessed atomically (`word`); the buffer is
// freed only by dropping the owner.
unsafe impl Sync for Gates {}

impl Gates {
    fn word(&self, k: usize) -> &AtomicU32 {
        let p = self.words.bytes().as_ptr().wrapping_add(4 * k) as *mut u32;
        // SAFETY: `k` indexes a word inside the page-aligned buffer (callers pass indices
        // below the count it was sized for); the device only reads these words.
        unsafe { AtomicU32::from_ptr(p) }
    }

    fn count(&self) -> usize {
        self.words.len() / 4
    }

    /// Closes every gate; before a run's kernels can start.
    pub fn close_all(&self) {
        (0..self.count()).for_each(|k| self.word(k).store(0, Ordering::Relaxed));
    }

    /// Opens gate `k`: the chunk's bytes stored before are visible to a kernel that sees it.
    pub fn open(&self, k: usize) {
        self.word(k).store(1, Ordering::Release);
    }

    /// Opens every gate (a run that failed after its launch must still let it finish).
    pub fn open_all(&self) {
        (0..self.count()).for_each(|k| self.open(k));
    }
}

/// An input copied inside the graph: its chunking and its first gate.
#[derive(Debug, Clone, Copy)]
pub(super) struct GatedInput {
    pub plan: ChunkPlan,
    pub first_gate: usize,
}

/// The copies a run issues inside the graph: inputs before the kernels, outputs and the error
/// word after them.
pub(super) struct HostIo {
    on: bool,
    /// Per program input: its gated copy, if it has one.
    pub ins: Vec<Option<GatedInput>>,
    /// Per program output: whether it is written into its staging inside the graph.
    pub outs: Vec<bool>,
    pub gates: Gates,
    to_dev: Vec<KernelLaunch>,
    to_host: Vec<KernelLaunch>,
}

fn copy_kernel(dev: &Device, src: u64, dst: u64, bytes: usize) -> KernelLaunch {
    let units = bytes.div_ceil(16).max(1) as u64;
    let blocks = units.div_ceil(u64::from(THREADS)).min(4 * dev.sms as u64) as u32;
    KernelLaunch {
        func: dev.func("k_copy_bytes"),
        grid: (blocks.max(1), 1, 1),
        block: (THREADS, 1, 1),
        smem: 0,
        // Fixed addresses: these launches are never relocated.
        args: vec![
            Arg::Ptr(src, Loc::Null),
            Arg::Ptr(dst, Loc::Null),
            Arg::I64(bytes as i64),
        ],
    }
}

fn gated_kernel(
    dev: &Device,
    src: u64,
    dst: u64,
    bytes: usize,
    plan: ChunkPlan,
    gates: u64,
) -> KernelLaunch {
    let chunks = plan.count(bytes) as u32;
    // Enough blocks that a chunk's copy is one or two rounds of 16-byte loads over the
    // link, few enough that every chunk's blocks are resident at once.
    let per_chunk = (plan.bytes.div_ceil(16 * THREADS as usize) as u32).clamp(1, 32);
    KernelLaunch {
        func: dev.func("k_copy_gated"),
        grid: (chunks * per_chunk, 1, 1),
        block: (THREADS, 1, 1),
        smem: 0,
        args: vec![
            Arg::Ptr(src, Loc::Null),
            Arg::Ptr(dst, Loc::Null),
            Arg::I64(bytes as i64),
            Arg::I64(plan.bytes as i64),
            Arg::I32(per_chunk as i32),
            Arg::Ptr(gates, Loc::Null),
        ],
    }
}

impl HostIo {
    /// Gates every staged input and copies every staged output of at most
    /// [`OUT_IN_GRAPH_MAX`] bytes and the error word inside the graph (nothing when
    /// `NPU_CUDA_GRAPH_IO=0`).
    pub fn new(
        dev: &Arc<Device>,
        inputs: (&[Option<DevBuf>], &[Option<Pinned>]),
        outputs: (&[Option<DevBuf>], &[Option<Pinned>]),
        err: (&DevBuf, &Pinned),
    ) -> CudaResult<HostIo> {
        let on = on_from_env();
        let mut ins = Vec::new();
        let mut n_gates = 0;
        for (buf, stage) in inputs.0.iter().zip(inputs.1) {
            ins.push(match (on, buf, stage) {
                (true, Some(_), Some(s)) => {
                    let plan = ChunkPlan::for_len(s.len(), SMALL_CHUNK);
                    let g = GatedInput {
                        plan,
                        first_gate: n_gates,
                    };
                    n_gates += plan.count(s.len());
                    Some(g)
                }
                _ => None,
            });
        }
        let outs: Vec<bool> = outputs
            .0
            .iter()
            .zip(outputs.1)
            .map(|(b, s)| {
                on && b.is_some() && s.as_ref().is_some_and(|s| s.len() <= OUT_IN_GRAPH_MAX)
            })
            .collect();
        let gates = Gates {
            words: Pinned::new(dev, 4 * n_gates.max(1), "the input gates")?,
        };
        let mut io = HostIo {
            on,
            ins,
            outs,
            gates,
            to_dev: Vec::new(),
            to_host: Vec::new(),
        };
        if !on {
            return Ok(io);
        }
        let gates_at = io.gates.words.mapped()?;
        for (i, (buf, stage)) in inputs.0.iter().zip(inputs.1).enumerate() {
            if let (Some(g), Some(b), Some(s)) = (io.ins[i], buf, stage) {
                let at = gates_at + 4 * g.first_gate as u64;
                io.to_dev
                    .push(gated_kernel(dev, s.mapped()?, b.ptr, s.len(), g.plan, at));
            }
        }
        for (o, (buf, stage)) in outputs.0.iter().zip(outputs.1).enumerate() {
            if let (true, Some(b), Some(s)) = (io.outs[o], buf, stage) {
                io.to_host
                    .push(copy_kernel(dev, b.ptr, s.mapped()?, s.len()));
            }
        }
        io.to_host
            .push(copy_kernel(dev, err.0.ptr, err.1.mapped()?, err.1.len()));
        Ok(io)
    }

    /// Whether runs copy inside the graph (the error word then comes back with the outputs).
    pub fn on(&self) -> bool {
        self.on
    }

    /// Enqueues the inputs' gated copies (before the run's kernels).
    pub fn enqueue_inputs(&mut self, dev: &Device) -> CudaResult<()> {
        self.to_dev
            .iter_mut()
            .try_for_each(|k| super::CudaExecutable::launch_kernel(dev, k))
    }

    /// Enqueues the outputs' and the error word's copies (after the run's kernels).
    pub fn enqueue_outputs(&mut self, dev: &Device) -> CudaResult<()> {
        self.to_host
            .iter_mut()
            .try_for_each(|k| super::CudaExecutable::launch_kernel(dev, k))
    }
}
