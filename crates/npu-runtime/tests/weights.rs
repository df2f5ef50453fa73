//! Weight loading: recipes (BN fold incl. bias-less conv, cast, padding), clear errors for
//! missing / mis-shaped / mis-typed tensors, extra tensors ignored; input validation.

use npu_compiler::program::{Recipe, SourceTensor, WeightSlot};
use npu_compiler::{target, CompileOptions, Program};
use npu_ir::DType;
use npu_runtime::weights::build_weights;
use npu_runtime::{Backend, CpuBackend, HostTensor, MemoryWeights, RuntimeError};
use std::collections::HashMap;

fn program(sources: Vec<SourceTensor>, weights: Vec<WeightSlot>) -> Program {
    Program {
        model_name: "t".into(),
        target: "cpu".into(),
        compute_dtype: DType::F32,
        inputs: vec![],
        outputs: vec![],
        sources,
        weights,
        constants: vec![],
        arena_bytes: 0,
        steps: vec![],
    }
}

fn src(key: &str, shape: &[usize], dtype: DType) -> SourceTensor {
    SourceTensor {
        key: key.into(),
        shape: shape.to_vec(),
        dtype,
    }
}

fn mem(ts: &[(&str, HostTensor)]) -> MemoryWeights {
    MemoryWeights(
        ts.iter()
            .map(|(k, t)| (k.to_string(), t.clone()))
            .collect::<HashMap<_, _>>(),
    )
}

#[test]
fn bn_fold_without_conv_bias_keeps_the_shift_term() {
    let p = program(
        vec![
            src("w", &[2, 1, 1, 1], DType::F32),
            src("g", &[2], DType::F32),
            src("b", &[2], DType::F32),
            src("m", &[2], DType::F32),
            src("v", &[2], DType::F32),
        ],
        vec![
            WeightSlot {
                name: "w#f".into(),
                shape: vec![2, 1, 1, 1],
                dtype: DType::F32,
                recipe: Recipe::BnFoldWeight {
                    weight: 0,
                    gamma: Some(1),
                    var: 4,
                    eps: 1e-5,
                },
            },
            WeightSlot {
                name: "w#b".into(),
                shape: vec![2],
                dtype: DType::F32,
                recipe: Recipe::BnFoldBias {
                    bias: None,
                    gamma: Some(1),
                    beta: Some(2),
                    mean: 3,
                    var: 4,
                    eps: 1e-5,
                },
            },
            // Padded to 4 channels for the NPU layout, stored as f16.
            WeightSlot {
                name: "w#b16".into(),
                shape: vec![4],
                dtype: DType::F16,
                recipe: Recipe::BnFoldBias {
                    bias: None,
                    gamma: Some(1),
                    beta: Some(2),
                    mean: 3,
                    var: 4,
                    eps: 1e-5,
                },
            },
        ],
    );
    let w = mem(&[
        ("w", HostTensor::from_f32(vec![2, 1, 1, 1], &[2.0, 3.0])),
        ("g", HostTensor::from_f32(vec![2], &[1.5, 0.5])),
        ("b", HostTensor::from_f32(vec![2], &[0.25, -1.0])),
        ("m", HostTensor::from_f32(vec![2], &[0.5, -2.0])),
        ("v", HostTensor::from_f32(vec![2], &[4.0, 1.0])),
        ("unused.extra", HostTensor::from_f32(vec![1], &[9.0])),
    ]);
    let out = build_weights(&p, &w).unwrap();
    let s = |v: f64, g: f64| g / (v + 1e-5f64).sqrt();
    let wf = out[0].to_f32_vec();
    assert!((f64::from(wf[0]) - 2.0 * s(4.0, 1.5)).abs() < 1e-6);
    let bf = out[1].to_f32_vec();
    let want0 = -0.5 * s(4.0, 1.5) + 0.25;
    let want1 = 2.0 * s(1.0, 0.5) - 1.0;
    assert!(
        (f64::from(bf[0]) - want0).abs() < 1e-6 && (f64::from(bf[1]) - want1).abs() < 1e-6,
        "{bf:?}"
    );
    let b16 = out[2].to_f32_vec();
    assert_eq!(out[2].dtype(), DType::F16);
    assert!(
        (f64::from(b16[1]) - want1).abs() < 1e-3 && b16[2] == 0.0 && b16[3] == 0.0,
        "{b16:?}"
    );
}

#[test]
fn missing_misshaped_and_mistyped_weights_name_the_tensor() {
    let p = program(
        vec![src("a", &[2, 3], DType::BF16), src("ids", &[2], DType::I64)],
        vec![
            WeightSlot {
                name: "a".into(),
                shape: vec![2, 3],
                dtype: DType::BF16,
                recipe: Recipe::Load { source: 0 },
            },
            WeightSlot {
                name: "ids".into(),
                shape: vec![2],
                dtype: DType::I64,
                recipe: Recipe::Load { source: 1 },
            },
        ],
    );
    // An f32 checkpoint for a bf16 slot converts.
    let ok = mem(&[
        (
            "a",
            HostTensor::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]),
        ),
        ("ids", HostTensor::from_i64(vec![2], &[4, 5])),
    ]);
    let out = build_weights(&p, &ok).unwrap();
    assert_eq!(out[0].dtype(), DType::BF16);
    assert_eq!(out[0].to_f32_vec(), vec![1., 2., 3., 4., 5., 6.]);

    let missing = mem(&[("ids", HostTensor::from_i64(vec![2], &[4, 5]))]);
    let e = build_weights(&p, &missing).unwrap_err();
    assert!(
        matches!(e, RuntimeError::MissingWeight { .. }) && e.to_string().contains("'a'"),
        "{e}"
    );

    let shaped = mem(&[
        ("a", HostTensor::from_f32(vec![3, 2], &[0.0; 6])),
        ("ids", HostTensor::from_i64(vec![2], &[4, 5])),
    ]);
    let e = build_weights(&p, &shaped).unwrap_err().to_string();
    assert!(
        e.contains("'a'") && e.contains("[2, 3]") && e.contains("[3, 2]"),
        "{e}"
    );

    let typed = mem(&[
        ("a", HostTensor::from_f32(vec![2, 3], &[0.0; 6])),
        ("ids", HostTensor::from_f32(vec![2], &[4.0, 5.0])),
    ]);
    let e = build_weights(&p, &typed).unwrap_err().to_string();
    assert!(
        e.contains("'ids'") && e.contains("int64") && e.contains("float32"),
        "{e}"
    );
}

#[test]
fn inputs_are_checked_by_name_shape_and_dtype_and_ints_stay_ints() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen2.5-tiny");
    let graph = npu_ir::load(&dir.join("decode.ir.json")).unwrap();
    let (p, _) = npu_compiler::compile(
        graph,
        &CompileOptions {
            target: &target::CPU,
            dtype: Some(DType::BF16),
        },
    )
    .unwrap();
    let ids = p.inputs.iter().find(|i| i.name == "input_ids").unwrap();
    assert_eq!(
        ids.storage,
        DType::I64,
        "token ids are never stored as floats"
    );
    let w = npu_runtime::SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let mut exe = CpuBackend::new().prepare(&p, &w).unwrap();
    let as_f32 = HostTensor::from_f32(vec![1, 1], &[3.0]);
    let e = exe
        .run_all(&[("input_ids", &as_f32)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input_ids") && e.contains("int64") && e.contains("float32"),
        "{e}"
    );
    let wrong = HostTensor::from_i64(vec![1, 2], &[3, 4]);
    let e = exe
        .run_all(&[("input_ids", &wrong)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("[1, 1]") && e.contains("[1, 2]"), "{e}");
    let e = exe.run_all(&[("nope", &wrong)]).unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains("input_ids"), "{e}");
    let ok = HostTensor::from_i64(vec![1, 1], &[3]);
    let e = exe.run_all(&[("input_ids", &ok)]).unwrap_err().to_string();
    assert!(e.contains("missing input 'attention_mask'"), "{e}");
    // Out-of-range token id: a run error, not an out-of-bounds access.
    let bad = HostTensor::from_i64(vec![1, 1], &[256]);
    let mask = HostTensor::zeros(DType::F32, vec![1, 1, 1, 64]);
    let pos = HostTensor::from_i64(vec![1, 1], &[0]);
    let cp = HostTensor::from_i64(vec![1], &[0]);
    let e = exe
        .run_all(&[
            ("input_ids", &bad),
            ("attention_mask", &mask),
            ("position_ids", &pos),
            ("cache_position", &cp),
        ])
        .unwrap_err()
        .to_string();
    assert!(e.contains("256") && e.contains("embedding"), "{e}");
}

/// A plain load of a tensor already in the slot's dtype and shape is handed over as the mapped
/// file's bytes; a cast or a concatenation is built, and building it lets the file's pages go
/// (`release`), with the same values either way.
#[test]
fn fitting_weights_are_used_in_place_and_built_ones_are_copies() {
    use npu_runtime::weights::weight_bytes;
    use npu_runtime::{write_safetensors, SafetensorsFile, WeightBytes};
    let a = HostTensor::from_f32_as(DType::BF16, vec![4, 3], &[0.5; 12]);
    let b = HostTensor::from_f32_as(DType::BF16, vec![2, 3], &[-1.25; 6]);
    let path = std::env::temp_dir().join(format!("npu-mapped-{}.safetensors", std::process::id()));
    write_safetensors(&path, &[("a".into(), a.clone()), ("b".into(), b.clone())]).unwrap();
    let file = SafetensorsFile::open(&path).unwrap();
    let slot = |name: &str, recipe: Recipe, dtype: DType, shape: &[usize]| WeightSlot {
        name: name.into(),
        recipe,
        dtype,
        shape: shape.to_vec(),
    };
    let p = program(
        vec![
            src("a", &[4, 3], DType::BF16),
            src("b", &[2, 3], DType::BF16),
        ],
        vec![
            slot("as is", Recipe::Load { source: 0 }, DType::BF16, &[4, 3]),
            slot("cast", Recipe::Load { source: 0 }, DType::F32, &[4, 3]),
            slot(
                "concat",
                Recipe::Concat {
                    sources: vec![0, 1],
                },
                DType::BF16,
                &[6, 3],
            ),
        ],
    );
    let as_is = weight_bytes(&p, 0, &file).unwrap();
    assert!(matches!(as_is, WeightBytes::Mapped(_)), "{as_is:?}");
    assert_eq!(as_is.bytes(), a.bytes());
    let cast = weight_bytes(&p, 1, &file).unwrap();
    assert!(matches!(cast, WeightBytes::Owned(_)));
    assert_eq!(cast.bytes(), a.cast(DType::F32).unwrap().bytes());
    let concat = weight_bytes(&p, 2, &file).unwrap();
    assert!(matches!(concat, WeightBytes::Owned(_)));
    assert_eq!(&concat.bytes()[..24], a.bytes());
    assert_eq!(&concat.bytes()[24..], b.bytes());
    // after the release the mapped bytes still read the same
    assert_eq!(as_is.bytes(), a.bytes());
    let _ = std::fs::remove_file(path);
}
