//! Large graphs compile without recursion: every graph walk is iterative, so a long chain
//! compiles on a thread whose stack holds a few hundred frames at most. (Release-mode
//! timing of 200k-node graphs is the `large_graph` example; tests assert no times.)

#[path = "large/chain.rs"]
mod chain;

use chain::{chain, Link};
use npu_compiler::{compile, CompileOptions};

/// Parses and compiles `text` on a thread with a 256 KiB stack.
fn compile_on_small_stack(text: String) -> npu_compiler::Program {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let g = npu_ir::parse_str(&text).expect("the chain parses");
            compile(g, &CompileOptions::default())
                .expect("the chain compiles")
                .0
        })
        .unwrap()
        .join()
        .expect("no stack overflow or panic")
}

#[test]
fn a_long_relu_chain_compiles_on_a_small_stack() {
    // 20k links need ~40k nested frames in a recursive fusion: far beyond 256 KiB.
    let p = compile_on_small_stack(chain(20_000, Link::Relu));
    // Chains fuse into bounded expressions, one kernel per group.
    assert!(
        p.steps.len() >= 20 && p.steps.len() <= 40,
        "{}",
        p.steps.len()
    );
}

#[test]
fn a_long_unfusable_chain_compiles_and_reuses_memory() {
    let p = compile_on_small_stack(chain(20_000, Link::Softmax));
    assert_eq!(p.steps.len(), 20_000);
    // Two live [4, 8] f32 buffers at a time (128 B each, 64-aligned): the arena stays tiny.
    assert!(p.arena_bytes <= 4 * 128, "{}", p.arena_bytes);
}
