//! ResNet-18 at batch 4 and ResNet-50 at batch 1 and 4 end to end on the CPU backend against
//! PyTorch, f16 (NPU target, channel padding) and f32 compute (ResNet-18 at batch 1 runs on
//! every backend in the conformance suite, `npu-conformance`). The weights are too large to commit: this test runs on the exports
//! `scripts/make-test-models.sh` writes under `$NPU_TEST_MODELS` (default
//! `target/test-models`): `{resnet18,resnet18-b4,resnet50,resnet50-b4}`. A missing export is
//! reported and skipped, or fails the test when `NPU_REQUIRE_MODELS=1` (as scripts/test.sh
//! and CI set it).

use npu_compiler::{target, CompileOptions};
use npu_ir::DType;
use npu_runtime::{read_safetensors, Backend, CpuBackend, HostTensor, SafetensorsFile};
use std::path::PathBuf;

use npu_runtime::compare::{argmax, pearson, top5};

#[test]
fn resnets_match_pytorch_f16_and_f32_batch_1_and_4() {
    let root = std::env::var_os("NPU_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-models")
        });
    let required = std::env::var("NPU_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    for model in ["resnet18-b4", "resnet50", "resnet50-b4"] {
        let dir = root.join(model);
        if !dir.join("weights.safetensors").exists() {
            assert!(
                !required,
                "{}: no export; run scripts/make-test-models.sh",
                dir.display()
            );
            // scripts/test.sh counts this line as a skip.
            println!(
                "SKIP: resnets_match_pytorch_f16_and_f32_batch_1_and_4: no export in {} (scripts/make-test-models.sh makes it)",
                dir.display()
            );
            continue;
        }
        let io: Vec<(String, HostTensor)> = read_safetensors(&dir.join("io.safetensors")).unwrap();
        let get = |k: &str| io.iter().find(|(n, _)| n == k).unwrap().1.clone();
        let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
        for (tgt, dt) in [(&target::NPU, DType::F16), (&target::CPU, DType::F32)] {
            let graph = npu_ir::load(&dir.join("model.ir.json")).unwrap();
            let (p, _) = npu_compiler::compile(
                graph,
                &CompileOptions {
                    target: tgt,
                    dtype: Some(dt),
                },
            )
            .unwrap();
            let mut exe = CpuBackend::new().prepare(&p, &w).unwrap();
            let x = get("input.x");
            let out = exe.run_all(&[("x", &x)]).unwrap();
            let (name, got) = &out[0];
            let want = get(&format!("output.{name}"));
            let (g, wv) = (got.to_f32_vec(), want.to_f32_vec());
            let r = pearson(&g, &wv);
            assert!(r > 0.99, "{model} {dt}: pearson {r}");
            let classes = *want.shape().last().unwrap();
            for (a, b) in g.chunks(classes).zip(wv.chunks(classes)) {
                assert_eq!(top5(a), top5(b), "{model} {dt}: top-5");
                assert_eq!(argmax(a), argmax(b), "{model} {dt}: argmax");
            }
            eprintln!("{model} {dt}: pearson {r:.6}, argmax and top-5 equal");
        }
    }
}
