//! Symbolic device addresses: a planned launch names a slot and byte offset, resolved against
//! the run's base pointers just before launch, so plans outlive any one allocation.

use npu_program::program::Slot;

/// Where a device address points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Loc {
    Slot(Slot, u64),
    /// The executable's scratch buffer at a byte offset.
    Scratch(u64),
    /// The executable's region for data kept across steps (`plan::persist`) at a byte offset.
    Persist(u64),
    /// The run's error word.
    Err,
    /// The executable's launch counters (`crate::sync`) at a byte offset.
    Sync(u64),
    /// No buffer (an absent optional operand).
    Null,
}

/// Base device addresses of the run's buffers.
pub(crate) struct Bases<'a> {
    pub inputs: &'a [u64],
    pub outputs: &'a [u64],
    pub weights: &'a [u64],
    pub consts: &'a [u64],
    pub arena: u64,
    pub scratch: u64,
    pub persist: u64,
    pub err: u64,
    pub sync: u64,
}

impl Bases<'_> {
    pub fn resolve(&self, loc: Loc) -> u64 {
        match loc {
            Loc::Slot(s, off) => {
                let base = match s {
                    Slot::Input(i) => self.inputs[i as usize],
                    Slot::Output(i) => self.outputs[i as usize],
                    Slot::Weight(i) => self.weights[i as usize],
                    Slot::Const(i) => self.consts[i as usize],
                    Slot::Arena => self.arena,
                };
                base + off
            }
            Loc::Scratch(off) => self.scratch + off,
            Loc::Persist(off) => self.persist + off,
            Loc::Err => self.err,
            Loc::Sync(off) => self.sync + off,
            Loc::Null => 0,
        }
    }
}
