//! Inputs copied inside a replay as the host converts them: the replay is launched first, the
//! host then converts each input chunk by chunk into its staging and publishes every chunk by
//! a store to its gate word (page-locked, mapped), and the run's first kernels
//! (`k_copy_gated`) copy each chunk once its gate is set. So the conversion overlaps the
//! launch, the graph's start and the copies, where before the replay waited for all of it.
//!
//! One block polls the gates and relays each into a device word that the copying blocks
//! wait on: a block polling host memory adds about a microsecond to every round trip
//! (`npu-cuda-bench gate-probe`: 2.3 us with one polling block, 82 us with 80; the first
//! version, every block polling its own chunk's gate, made ResNet-18's whole run slower).
//!
//! Invariants: every gate is zero when a run is launched ([`Gates::reset`] before each run)
//! and set by the time the run's host side returns (published, or released on an error path),
//! so no run's copies wait for a later run's host. Runs that are not a replay publish before
//! launching: a launch may block while the device waits for a gate the host has not set.

use super::staging::{self, Pinned};
use crate::device::{DevBuf, Device};
use crate::error::CudaResult;
use crate::launch::{Arg, KernelLaunch};
use crate::loc::Loc;
use npu_ir::DType;
use npu_runtime::Result;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Staging bytes a gate covers: a few microseconds of conversion, so the first copy starts
/// early, and a copy of a chunk keeps the host link busy while the next converts.
pub(super) const GATE_CHUNK: usize = 64 << 10;
/// Copying blocks a chunk: 256 threads with four 16-byte loads in flight each, so a chunk
/// crosses the host link in one round of reads.
const BLOCKS_PER_CHUNK: usize = GATE_CHUNK / (256 * 4 * 16);
const THREADS: u32 = 256;

/// Eighths of a gated input's chunks a replay converts before its launch
/// (`NPU_CUDA_GATE_EARLY`, default 4).
pub(super) fn early_eighths() -> usize {
    std::env::var("NPU_CUDA_GATE_EARLY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// Whether host runs gate their inputs (`NPU_CUDA_GATED_IO=0` copies them after the whole
/// conversion instead, for comparisons).
pub(super) fn on_from_env() -> bool {
    std::env::var("NPU_CUDA_GATED_IO").map_or(true, |v| v != "0")
}

/// The gates of every gated input of an executable.
pub(super) struct Gates {
    /// One word a chunk of every gated input: the host's publications.
    words: Pinned,
    /// `k_copy_gated`'s relay: a flag word a chunk, then a count word a chunk.
    relay: DevBuf,
    /// Per program input: its first chunk's word and its chunk count, when gated.
    spans: Vec<Option<(usize, usize)>>,
}

impl Gates {
    /// Gates for the inputs marked in `gated` (their staging sizes in `stages`); `None` when
    /// none is.
    pub fn new(
        dev: &Arc<Device>,
        gated: &[bool],
        stages: &[Option<Pinned>],
    ) -> CudaResult<Option<Gates>> {
        let mut spans = Vec::with_capacity(gated.len());
        let mut total = 0;
        for (on, stage) in gated.iter().zip(stages) {
            match stage {
                Some(s) if *on => {
                    let n = s.len().div_ceil(GATE_CHUNK).max(1);
                    spans.push(Some((total, n)));
                    total += n;
                }
                _ => spans.push(None),
            }
        }
        if total == 0 {
            return Ok(None);
        }
        Ok(Some(Gates {
            words: Pinned::new(dev, 4 * total, "the input gates")?,
            relay: DevBuf::zeroed(dev, 8 * total, "the input gates' relay")?,
            spans,
        }))
    }

    pub fn is_gated(&self, input: usize) -> bool {
        self.spans.get(input).is_some_and(Option::is_some)
    }

    /// The gated copy of `input` (`bytes` from staging's mapped address `src` to `dst`).
    pub fn copy_kernel(
        &self,
        dev: &Device,
        input: usize,
        src: u64,
        dst: u64,
        bytes: usize,
    ) -> CudaResult<KernelLaunch> {
        let (first, n) = self.spans[input].expect("a gated input");
        let gates = self.words.mapped()? + 4 * first as u64;
        let total = self.words.len() / 4;
        let flags = self.relay.ptr + 4 * first as u64;
        let counts = self.relay.ptr + 4 * (total + first) as u64;
        Ok(KernelLaunch {
            func: dev.func("k_copy_gated"),
            grid: ((1 + n * BLOCKS_PER_CHUNK) as u32, 1, 1),
            block: (THREADS, 1, 1),
            smem: 0,
            // Fixed addresses: these launches are never relocated.
            args: vec![
                Arg::Ptr(src, Loc::Null),
                Arg::Ptr(dst, Loc::Null),
                Arg::I64(bytes as i64),
                Arg::I64(GATE_CHUNK as i64),
                Arg::I32(BLOCKS_PER_CHUNK as i32),
                Arg::Ptr(gates, Loc::Null),
                Arg::Ptr(flags, Loc::Null),
                Arg::Ptr(counts, Loc::Null),
            ],
        })
    }

    /// Zeroes every gate (before a run is launched; the last run has finished).
    pub fn reset(&self) {
        self.words
            .words()
            .iter()
            .for_each(|w| w.store(0, Ordering::Relaxed));
    }

    /// Sets every gate: an error path's release of a launched run's copies.
    pub fn release_all(&self) {
        self.words
            .words()
            .iter()
            .for_each(|w| w.store(1, Ordering::Release));
    }

    /// Converts `src` into `input`'s staging chunk by chunk on this thread, setting each
    /// chunk's gate once its bytes are there.
    pub fn publish(
        &self,
        input: usize,
        stage: &mut Pinned,
        src: &[u8],
        dtypes: (DType, DType),
        what: &str,
    ) -> Result<()> {
        staging::check_len(stage, src, dtypes, what)?;
        let (first, second) = self.halves(input, stage.bytes_mut(), src, dtypes, what, 8);
        first.run()?;
        second.run()
    }

    /// `input`'s conversion as two parts by chunks, the first `eighths` / 8 of them (rounded
    /// down) and the rest, each setting its chunks' gates (release stores: the device reads a
    /// chunk after its gate). `stage` is the input's staging bytes, `src` checked against it.
    pub fn halves<'a>(
        &'a self,
        input: usize,
        stage: &'a mut [u8],
        src: &'a [u8],
        dtypes: (DType, DType),
        what: &'a str,
        eighths: usize,
    ) -> (Part<'a>, Part<'a>) {
        let (first, n) = self.spans[input].expect("a gated input");
        let words = &self.words.words()[first..first + n];
        let (fs, ts) = (dtypes.0.size_bytes().max(1), dtypes.1.size_bytes().max(1));
        let h = n * eighths.min(8) / 8;
        let at = (h * GATE_CHUNK).min(stage.len());
        let (d0, d1) = stage.split_at_mut(at);
        let (s0, s1) = src.split_at((at / ts * fs).min(src.len()));
        let part = |dst, src, gates| Part {
            dst,
            src,
            gates,
            dtypes,
            what,
        };
        (part(d0, s0, &words[..h]), part(d1, s1, &words[h..]))
    }
}

/// Chunks of one input to convert into staging and publish (see [`Gates::halves`]).
pub(super) struct Part<'a> {
    dst: &'a mut [u8],
    src: &'a [u8],
    gates: &'a [AtomicU32],
    dtypes: (DType, DType),
    what: &'a str,
}

impl Part<'_> {
    pub fn run(self) -> Result<()> {
        let gates = self.gates;
        staging::convert_chunks(
            self.dst,
            self.src,
            self.dtypes,
            self.what,
            GATE_CHUNK,
            |k| gates[k].store(1, Ordering::Release),
        )?;
        // An empty part or tensor converts no chunk: its gates still open.
        gates.iter().for_each(|w| w.store(1, Ordering::Release));
        Ok(())
    }
}
