//! Planned launches: kernel arguments with device addresses still symbolic (slot + byte
//! offset), resolved against the run's base pointers. Nothing here allocates per run, so a
//! whole run can be captured in a CUDA graph.

use crate::device::Func;
use crate::loc::{Bases, Loc};
use crate::lt_call::LtCall;
use npu_ir::DType;
use npu_program::program::{Binding, Slot};
use std::ffi::c_void;

pub(crate) const MAXR: usize = 8;

/// The kernels' `TD` (kernels/common.cuh): pointer, dtype code, rank, shape, strides.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Td {
    pub ptr: u64,
    pub dt: i32,
    pub rank: i32,
    pub sh: [i64; MAXR],
    pub st: [i64; MAXR],
}

pub(crate) fn dtype_code(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::F64 => 3,
        DType::I64 => 4,
        DType::I32 => 5,
        DType::I16 => 6,
        DType::I8 => 7,
        DType::U8 => 8,
        DType::Bool => 9,
    }
}

/// The epilogue activation's code for `apply_unary` (generated from the pointwise table),
/// -1 for none.
pub(crate) fn unary_code(u: Option<npu_ir::UnaryOp>) -> i32 {
    u.map_or(-1, |u| u.act_code())
}

/// A tensor operand: its descriptor and where its pointer comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TdArg {
    pub td: Td,
    pub loc: Loc,
}

impl TdArg {
    /// Whether the operand may start 16 bytes misaligned: only a slot binding at an offset
    /// that is not a multiple of 16 can (slots and scratch regions start 256-byte aligned).
    pub fn aligned16(&self) -> bool {
        !matches!(self.loc, Loc::Slot(_, off) if off % 16 != 0)
    }

    pub fn of(b: &Binding) -> TdArg {
        let mut td = Td {
            dt: dtype_code(b.dtype),
            rank: b.shape.len() as i32,
            ..Td::default()
        };
        for (i, (&d, &s)) in b.shape.iter().zip(&b.strides).enumerate().take(MAXR) {
            td.sh[i] = d as i64;
            td.st[i] = s as i64;
        }
        TdArg {
            td,
            loc: Loc::Slot(b.slot, b.byte_offset),
        }
    }

    /// A dense tensor in scratch.
    pub fn scratch(off: u64, dtype: DType, shape: &[usize]) -> TdArg {
        let b = Binding {
            slot: Slot::Arena,
            byte_offset: 0,
            shape: shape.to_vec(),
            strides: npu_program::program::dense_strides(shape),
            dtype,
        };
        TdArg {
            loc: Loc::Scratch(off),
            ..TdArg::of(&b)
        }
    }

    /// An absent operand.
    pub fn null() -> TdArg {
        TdArg {
            td: Td {
                rank: 1,
                sh: [1; MAXR],
                ..Td::default()
            },
            loc: Loc::Null,
        }
    }

    /// The same storage `bytes` further on (a slot's location; scratch and null stay).
    pub fn skip(mut self, bytes: u64) -> TdArg {
        if let Loc::Slot(s, off) = self.loc {
            self.loc = Loc::Slot(s, off + bytes);
        }
        self
    }

    /// The same storage seen with another shape and element strides (same rank for both).
    pub fn laid_out(mut self, shape: &[i64], strides: &[i64]) -> TdArg {
        self.td.rank = shape.len() as i32;
        self.td.sh[..shape.len()].copy_from_slice(shape);
        self.td.st[..strides.len()].copy_from_slice(strides);
        self
    }

    /// The same tensor seen with `rank` dims: missing leading dims and size-1 dims
    /// broadcast (stride 0), right-aligned as the CPU's batch_off does.
    pub fn aligned_to(&self, shape: &[usize]) -> TdArg {
        let r = shape.len();
        let own = self.td.rank as usize;
        let mut out = *self;
        out.td.rank = r as i32;
        for (d, &n) in shape.iter().enumerate() {
            let od = d as isize - (r as isize - own as isize);
            out.td.sh[d] = n as i64;
            out.td.st[d] = if od >= 0 && self.td.sh[od as usize] != 1 {
                self.td.st[od as usize]
            } else {
                0
            };
        }
        out
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    Td(TdArg),
    Ptr(u64, Loc),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Arg {
    /// The binding's first element as a raw pointer argument.
    pub fn ptr_of(b: &Binding) -> Arg {
        Arg::Ptr(0, Loc::Slot(b.slot, b.byte_offset))
    }
}

pub(crate) struct KernelLaunch {
    pub func: Func,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem: u32,
    pub args: Vec<Arg>,
    /// Blocks per thread-block cluster along x (1: no cluster); it divides `grid.0`, and the
    /// function was allowed that size (`Device::cluster_max`).
    pub cluster: u32,
}

pub(crate) enum Launch {
    Kernel(KernelLaunch),
    Lt(Box<LtCall>),
    Dnn(Box<crate::dnn::DnnConv>),
}

impl KernelLaunch {
    pub fn relocate(&mut self, b: &Bases) {
        for a in &mut self.args {
            match a {
                Arg::Td(t) => t.td.ptr = b.resolve(t.loc),
                Arg::Ptr(p, loc) => *p = b.resolve(*loc),
                _ => {}
            }
        }
    }

    /// Raw parameter pointers for cuLaunchKernel, valid while `self` is not moved.
    pub fn params(&mut self) -> Vec<*mut c_void> {
        self.args
            .iter_mut()
            .map(|a| match a {
                Arg::Td(t) => &mut t.td as *mut Td as *mut c_void,
                Arg::Ptr(p, _) => p as *mut u64 as *mut c_void,
                Arg::I32(v) => v as *mut i32 as *mut c_void,
                Arg::I64(v) => v as *mut i64 as *mut c_void,
                Arg::F32(v) => v as *mut f32 as *mut c_void,
                Arg::F64(v) => v as *mut f64 as *mut c_void,
            })
            .collect()
    }
}

/// Grid size for a grid-stride loop over `n` elements with 256 threads.
pub(crate) fn grid_for(n: usize) -> u32 {
    n.div_ceil(256).clamp(1, 65535 * 8) as u32
}
