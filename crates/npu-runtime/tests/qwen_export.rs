//! Qwen2.5 prefill + decode against a PyTorch export with weights (too large to commit):
//! runs on `$NPU_EXPORT_DIR/qwen2.5-1.5b` (or any Qwen export dir named there) when present.
//! Each decode step is fed the reference's token, and its logits must track PyTorch's
//! (Pearson r > 0.99, top-5 overlap >= 4/5). Use `cargo test --release` for the 1.5B model.

use npu_compiler::{target, CompileOptions};
use npu_runtime::{read_safetensors, Backend, CpuBackend, HostTensor, SafetensorsFile};
use std::path::PathBuf;

use npu_runtime::compare::{pearson, top5};

#[test]
fn qwen_export_logits_track_pytorch() {
    let Some(root) = std::env::var_os("NPU_EXPORT_DIR").map(PathBuf::from) else {
        // scripts/test.sh counts this line as a skip, not a pass.
        println!("SKIP: qwen_export_logits_track_pytorch: NPU_EXPORT_DIR is not set");
        return;
    };
    let dir = root.join(std::env::var("NPU_QWEN").unwrap_or_else(|_| "qwen2.5-1.5b".into()));
    if !dir.join("weights.safetensors").exists() {
        println!(
            "SKIP: qwen_export_logits_track_pytorch: no export in {}",
            dir.display()
        );
        return;
    }
    let compile = |f: &str| {
        let g = npu_ir::load(&dir.join(f)).unwrap();
        npu_compiler::compile(
            g,
            &CompileOptions {
                target: &target::CPU,
                dtype: None,
            },
        )
        .unwrap()
        .0
    };
    let (pre, dec) = (compile("prefill.ir.json"), compile("decode.ir.json"));
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let be = CpuBackend::new();
    let mut pre_x = be.prepare(&pre, &w).unwrap();
    let mut dec_x = be.prepare(&dec, &w).unwrap();
    let io: Vec<(String, HostTensor)> = read_safetensors(&dir.join("io.safetensors")).unwrap();
    let get = |k: &str| io.iter().find(|(n, _)| n == k).map(|x| x.1.clone());
    let mut state = pre_x.new_state();
    let inputs: Vec<(String, HostTensor)> = pre
        .inputs
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                get(&format!("prefill.input.{}", i.name)).unwrap(),
            )
        })
        .collect();
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let out = pre_x.run(&refs, state.as_mut()).unwrap();
    let want_pre = get(&format!("prefill.output.{}", out[0].0))
        .unwrap()
        .to_f32_vec();
    let r = pearson(&out[0].1.to_f32_vec(), &want_pre);
    eprintln!("prefill: pearson {r:.5}");
    assert!(r > 0.99);
    let want = get("greedy.logits").unwrap();
    let vocab = want.shape()[1];
    let want = want.to_f32_vec();
    for step in 0..want.len() / vocab {
        let g = |n: &str| get(&format!("decode.{step}.input.{n}")).unwrap();
        let (ids, mask, pos, cpos) = (
            g("input_ids"),
            g("attention_mask"),
            g("position_ids"),
            g("cache_position"),
        );
        let out = dec_x
            .run(
                &[
                    ("input_ids", &ids),
                    ("attention_mask", &mask),
                    ("position_ids", &pos),
                    ("cache_position", &cpos),
                ],
                state.as_mut(),
            )
            .unwrap();
        let l = out[0].1.to_f32_vec();
        let w = &want[step * vocab..(step + 1) * vocab];
        let r = pearson(&l, w);
        let (a, b) = (top5(&l), top5(w));
        let overlap = a.iter().filter(|x| b.contains(x)).count();
        eprintln!(
            "decode {step}: pearson {r:.5}, top-5 overlap {overlap}/5, argmax {} vs {}",
            a[0], b[0]
        );
        assert!(r > 0.99 && overlap >= 4, "step {step}");
    }
}
