//! The program contract between the compiler and every backend: a [`Program`] is a static
//! list of steps, each a [`Kernel`] over [`Binding`]s into slots (`program`), with each
//! kernel's operand contract stated once (`contract`), fused elementwise expressions
//! (`expr`), the pointwise iteration space every backend simplifies the same way
//! (`iteration`), runs of steps a backend may launch as one (`groups`) and the `.npubin`
//! container (`npubin`). Backends and the `.npubin` loader depend
//! on this crate, not on the compiler's passes.

pub mod contract;
pub mod expr;
pub mod groups;
pub mod iteration;
pub mod npubin;
pub mod program;

pub use npubin::NpubinError;
pub use program::{Binding, Kernel, Program, Slot, Step};
