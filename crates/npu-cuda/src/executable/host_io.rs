//! A host run's small inputs and outputs crossing the host link inside the run itself, so a
//! replay of the captured graph carries them and the host makes one driver call a run: the
//! host converts the inputs into their page-locked staging and launches; the run's first
//! kernels (`k_copy_bytes`) read each input through its staging's mapped device address, and
//! after the last step `k_copy_bytes` writes the outputs and the error word into theirs. The
//! error word rides on those launches (cleared by the first input's copy, brought back by the
//! last output's), so it takes no launch of its own.
//!
//! Inputs and outputs larger than [`IN_GRAPH_MAX`] keep copy-engine copies around the graph
//! (`staging::upload_async`), where the copy of one chunk overlaps the conversion of the
//! next; a copy inside the graph starts only after the whole conversion.
//!
//! Invariant: staging and device buffers never move, so the captured copies stay valid for
//! every later run. A run through caller-owned device memory (`run_device`) uses a graph
//! without these copies.

use super::staging::Pinned;
use crate::device::{DevBuf, Device};
use crate::error::CudaResult;
use crate::launch::{Arg, KernelLaunch};
use crate::loc::Loc;

/// The largest input or output (bytes of staging) copied inside the graph: one upload chunk.
pub(super) const IN_GRAPH_MAX: usize = super::staging::CHUNK;
const THREADS: u32 = 256;

/// Whether runs copy inside the graph (`NPU_CUDA_GRAPH_IO=0` turns it off, for comparisons).
fn on_from_env() -> bool {
    std::env::var("NPU_CUDA_GRAPH_IO").map_or(true, |v| v != "0")
}

/// The copies a run issues inside the graph: inputs before the kernels, outputs and the error
/// word after them.
pub(super) struct HostIo {
    on: bool,
    /// Per program input / output: whether its copy is inside the graph.
    pub ins: Vec<bool>,
    pub outs: Vec<bool>,
    to_dev: Vec<KernelLaunch>,
    to_host: Vec<KernelLaunch>,
}

/// `bytes` from `src` to `dst`, and with `word = Some((wsrc, wdst))` the word at `wsrc` (0
/// where `wsrc` is 0) stored at `wdst`.
fn copy_kernel(
    dev: &Device,
    src: u64,
    dst: u64,
    bytes: usize,
    word: Option<(u64, u64)>,
) -> KernelLaunch {
    let units = bytes.div_ceil(16).max(1) as u64;
    let blocks = units.div_ceil(u64::from(THREADS)).min(4 * dev.sms as u64) as u32;
    KernelLaunch {
        func: dev.func("k_copy_bytes"),
        grid: (blocks.max(1), 1, 1),
        block: (THREADS, 1, 1),
        smem: 0,
        cluster: 1,
        // Fixed addresses: these launches are never relocated.
        args: vec![
            Arg::Ptr(src, Loc::Null),
            Arg::Ptr(dst, Loc::Null),
            Arg::I64(bytes as i64),
            Arg::Ptr(word.map_or(0, |w| w.0), Loc::Null),
            Arg::Ptr(word.map_or(0, |w| w.1), Loc::Null),
        ],
    }
}

impl HostIo {
    /// Copies every staged input and output of at most [`IN_GRAPH_MAX`] bytes and the error
    /// word inside the graph (nothing when `NPU_CUDA_GRAPH_IO=0`).
    pub fn new(
        dev: &Device,
        inputs: (&[Option<DevBuf>], &[Option<Pinned>]),
        outputs: (&[Option<DevBuf>], &[Option<Pinned>]),
        err: (&DevBuf, &Pinned),
    ) -> CudaResult<HostIo> {
        let on = on_from_env();
        let small = |buf: &Option<DevBuf>, stage: &Option<Pinned>| {
            on && buf.is_some() && stage.as_ref().is_some_and(|s| s.len() <= IN_GRAPH_MAX)
        };
        let pick = |(bufs, stages): (&[Option<DevBuf>], &[Option<Pinned>])| -> Vec<bool> {
            bufs.iter().zip(stages).map(|(b, s)| small(b, s)).collect()
        };
        let mut io = HostIo {
            on,
            ins: pick(inputs),
            outs: pick(outputs),
            to_dev: Vec::new(),
            to_host: Vec::new(),
        };
        if !on {
            return Ok(io);
        }
        for (i, (buf, stage)) in inputs.0.iter().zip(inputs.1).enumerate() {
            if let (true, Some(b), Some(s)) = (io.ins[i], buf, stage) {
                // the first input's copy clears the error word
                let clear = io.to_dev.is_empty().then_some((0, err.0.ptr));
                io.to_dev
                    .push(copy_kernel(dev, s.mapped()?, b.ptr, s.len(), clear));
            }
        }
        let mut copies = Vec::new();
        for (o, (buf, stage)) in outputs.0.iter().zip(outputs.1).enumerate() {
            if let (true, Some(b), Some(s)) = (io.outs[o], buf, stage) {
                copies.push((b.ptr, s.mapped()?, s.len()));
            }
        }
        // the last output's copy brings the error word back (a copy of its own without one)
        let last = copies.len().saturating_sub(1);
        let word = (err.0.ptr, err.1.mapped()?);
        io.to_host = copies
            .iter()
            .enumerate()
            .map(|(k, &(src, dst, n))| copy_kernel(dev, src, dst, n, (k == last).then_some(word)))
            .collect();
        if io.to_host.is_empty() {
            io.to_host.push(copy_kernel(dev, 0, 0, 0, Some(word)));
        }
        Ok(io)
    }

    /// Whether runs copy inside the graph (the error word then comes back with the outputs).
    pub fn on(&self) -> bool {
        self.on
    }

    /// Whether the inputs' copies clear the error word (a host run then skips `k_clear_err`).
    pub fn clears_err(&self) -> bool {
        !self.to_dev.is_empty()
    }

    /// Enqueues the inputs' copies (before the run's kernels).
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
