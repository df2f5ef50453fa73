//! Portable graph passes, each a small rewrite of a [`crate::graph::Module`].

pub mod bn_fold;
pub mod canonicalize;
pub mod check;
pub mod concat_linear;
pub mod dce;
pub mod decompose;
pub mod layout;
pub mod validate;
