//! Data a step derives from an operand, kept for later steps that would derive the same.
//!
//! A prefill's 28 attention layers read one mask, and each marked the same live tiles
//! (`k_attn_tiles`) into the step's scratch, which the next step reuses. Here the first
//! derivation goes into a region of its own (`Loc::Persist`) that no other step writes, and a
//! later step with the identical source binding and parameters reads it instead of deriving
//! again, unless a step in between may have written the source's bytes.
//!
//! Invariant: an entry's region is written only by the launch planned with it, which runs
//! before every step that reads the entry, on every run (steps run in program order).

use super::align;
use npu_program::program::{Binding, Program, Slot};

/// One derivation: its source, what else it depends on, the step that computes it, where.
struct Entry {
    src: Binding,
    params: Vec<i64>,
    step: usize,
    off: u64,
}

/// The persistent region's layout, filled while the program's steps are planned in order.
#[derive(Default)]
pub(crate) struct Persistent {
    entries: Vec<Entry>,
    /// Bytes of the region so far.
    pub bytes: u64,
}

/// Where data derived from `src` lies, and whether the step asking must compute it.
pub(crate) struct Derived {
    pub off: u64,
    pub compute: bool,
}

impl Persistent {
    /// The region for `bytes` of data derived from `src` with `params` at step `at`: an
    /// earlier entry's when its source is unchanged since, else a new one to compute now.
    pub fn derive(
        &mut self,
        program: &Program,
        src: &Binding,
        params: &[i64],
        bytes: u64,
        at: usize,
    ) -> Derived {
        let reusable = |e: &&Entry| {
            e.src == *src
                && e.params == params
                && e.step < at
                && !program.steps[e.step + 1..at]
                    .iter()
                    .flat_map(|s| &s.outputs)
                    .any(|o| may_share(program, o, src))
        };
        if let Some(e) = self.entries.iter().rev().find(reusable) {
            return Derived {
                off: e.off,
                compute: false,
            };
        }
        let off = self.bytes;
        self.bytes += align(bytes);
        self.entries.push(Entry {
            src: src.clone(),
            params: params.to_vec(),
            step: at,
            off,
        });
        Derived { off, compute: true }
    }
}

/// Whether a write through `w` may change bytes `r` reads: the same slot's overlapping
/// ranges, or an output and the input it was donated (the two share one buffer).
pub(super) fn may_share(program: &Program, w: &Binding, r: &Binding) -> bool {
    let same_buffer = match (w.slot, r.slot) {
        (a, b) if a == b => true,
        (Slot::Output(o), Slot::Input(i)) | (Slot::Input(i), Slot::Output(o)) => {
            program
                .outputs
                .get(o as usize)
                .and_then(|t| t.donates_input)
                == Some(i)
        }
        _ => false,
    };
    same_buffer && w.byte_offset < r.end_byte() && r.byte_offset < w.end_byte()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::steps_program;
    use npu_ir::DType;
    use npu_program::program::{Kernel, Step};

    fn arena(off: u64, n: usize) -> Binding {
        Binding {
            slot: Slot::Arena,
            byte_offset: off,
            shape: vec![n],
            strides: vec![1],
            dtype: DType::F16,
        }
    }

    fn copy(from: Binding, to: Binding) -> Step {
        Step {
            kernel: Kernel::Copy,
            inputs: vec![from],
            outputs: vec![to],
            origin: String::new(),
        }
    }

    #[test]
    fn reused_until_the_source_may_have_been_rewritten() {
        let mask = arena(0, 64);
        // step 1 writes elsewhere; step 3 writes the mask's last element
        let p = steps_program(vec![
            copy(arena(256, 8), arena(512, 8)),
            copy(arena(256, 8), arena(512, 8)),
            copy(arena(256, 8), arena(512, 8)),
            copy(arena(256, 8), arena(126, 1)),
            copy(arena(256, 8), arena(512, 8)),
        ]);
        let mut per = Persistent::default();
        let first = per.derive(&p, &mask, &[2], 100, 0);
        assert!(first.compute);
        let again = per.derive(&p, &mask, &[2], 100, 2);
        assert!(!again.compute);
        assert_eq!(again.off, first.off);
        // other parameters: derived anew
        assert!(per.derive(&p, &mask, &[3], 100, 2).compute);
        // after step 3's write: derived anew, in a region of its own
        let after = per.derive(&p, &mask, &[2], 100, 4);
        assert!(after.compute);
        assert!(after.off >= first.off + 256);
        assert_eq!(per.bytes % 256, 0);
    }
}
